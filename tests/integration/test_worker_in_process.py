"""The worker's internals in one process: the Worker loop, its completion batcher and its API client,
claiming from a real PostgreSQL and reporting to a scripted WorkerService served by a real grpc.aio
server on a loopback port. Tests wait on the signals the worker raises (claimed, reported, stopped)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from jobs.v1 import jobs_pb2, worker_pb2, worker_pb2_grpc
from shared.domain.ids import JobId
from shared.handlers import HandlerRegistry, JobContext, PushedBack, RetryableError
from shared.storage.database import Database
from tests import factories, handlers_for_tests
from worker_service.api_client import ApiClient
from worker_service.health_server import WorkerHealth
from worker_service.kind_publisher import KindPublisher
from worker_service.metrics import WorkerMetrics
from worker_service.settings import WorkerSettings
from worker_service.worker import RELEASE_DEADLINE_SECONDS, Worker
from worker_service.worker_signals import Signal, SignalRecord, WorkerSignals

pytestmark = pytest.mark.timeout(60)

R = worker_pb2.ReportOutcome
WAIT_SECONDS = 30.0
UNTIL_SECONDS = 90.0


class ScriptedWorkerService(worker_pb2_grpc.WorkerServiceServicer):
    """Answers as scripted and keeps every request; it never touches the database, so the jobs the
    worker claimed stay RUNNING there (their leases outlive the test)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.completions: list[worker_pb2.CompleteJobRequest] = []
        self.failures: list[worker_pb2.FailJobRequest] = []
        self.releases: list[worker_pb2.ReleaseJobRequest] = []
        # The time each ReleaseJobs call had left by its gRPC deadline, as the server saw it.
        self.release_time_remaining: list[float | None] = []
        self.completion_answers: dict[str, worker_pb2.ReportOutcome] = {}
        self.completion_outages = 0
        # Jobs whose heartbeat answers that a cancel was requested (the lease still held).
        self.cancel_requested: set[str] = set()
        # Every call in order, with the job ids it named.
        self.log: list[tuple[str, list[str]]] = []
        self.shipped_lines: list[str] = []
        self.lines_arrived = asyncio.Event()

    async def Heartbeat(self, request: worker_pb2.HeartbeatRequest, context: Any) -> worker_pb2.HeartbeatResponse:
        self.calls["Heartbeat"] += 1
        self.log.append(("Heartbeat", [x.job_id for x in request.leases]))
        held = [
            worker_pb2.LeaseStatus(
                job_id=x.job_id,
                fencing_token=x.fencing_token,
                held=True,
                cancel_requested=x.job_id in self.cancel_requested,
                outcome=R.REPORT_OUTCOME_ACCEPTED,
            )
            for x in request.leases
        ]
        return worker_pb2.HeartbeatResponse(leases=held)

    async def AppendJobLogs(
        self, request: worker_pb2.AppendJobLogsRequest, context: Any
    ) -> worker_pb2.AppendJobLogsResponse:
        self.calls["AppendJobLogs"] += 1
        self.log.append(("AppendJobLogs", [x.job_id for x in request.logs]))
        self.shipped_lines.extend(line.message for x in request.logs for line in x.lines)
        self.lines_arrived.set()
        return worker_pb2.AppendJobLogsResponse(
            outcomes=[
                worker_pb2.AppendJobLogsOutcome(job_id=x.job_id, outcome=R.REPORT_OUTCOME_ACCEPTED)
                for x in request.logs
            ]
        )

    async def CompleteJobs(
        self, request: worker_pb2.CompleteJobsRequest, context: Any
    ) -> worker_pb2.CompleteJobsResponse:
        self.calls["CompleteJobs"] += 1
        if self.completion_outages > 0:
            self.completion_outages -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted outage")
        self.completions.extend(request.completions)
        return worker_pb2.CompleteJobsResponse(
            outcomes=[
                worker_pb2.CompletionOutcome(
                    job_id=c.job_id, outcome=self.completion_answers.get(c.job_id, R.REPORT_OUTCOME_ACCEPTED)
                )
                for c in request.completions
            ]
        )

    async def FailJobs(self, request: worker_pb2.FailJobsRequest, context: Any) -> worker_pb2.FailJobsResponse:
        self.calls["FailJobs"] += 1
        self.failures.extend(request.failures)
        return worker_pb2.FailJobsResponse(
            outcomes=[
                worker_pb2.FailureOutcome(
                    job_id=f.job_id,
                    outcome=R.REPORT_OUTCOME_ACCEPTED,
                    state=jobs_pb2.JOB_STATE_PENDING if f.pushed_back else jobs_pb2.JOB_STATE_RETRY_WAIT,
                )
                for f in request.failures
            ]
        )

    async def ReleaseJobs(self, request: worker_pb2.ReleaseJobsRequest, context: Any) -> worker_pb2.ReleaseJobsResponse:
        self.calls["ReleaseJobs"] += 1
        self.log.append(("ReleaseJobs", [r.job_id for r in request.releases]))
        self.release_time_remaining.append(context.time_remaining())
        self.releases.extend(request.releases)
        return worker_pb2.ReleaseJobsResponse(
            outcomes=[
                worker_pb2.ReleaseOutcome(
                    job_id=r.job_id,
                    outcome=R.REPORT_OUTCOME_ACCEPTED,
                    state=jobs_pb2.JOB_STATE_CANCELLED
                    if r.job_id in self.cancel_requested
                    else jobs_pb2.JOB_STATE_PENDING,
                )
                for r in request.releases
            ]
        )


async def _echo(ctx: JobContext) -> bytes:
    return ctx.payload


async def _until_stopped(ctx: JobContext) -> bytes:
    await ctx.stop_requested.wait()
    return b""


async def _logs_until_stopped(ctx: JobContext) -> bytes:
    ctx.log.info("started the long part")
    try:
        await ctx.stop_requested.wait()
    except asyncio.CancelledError:  # a stop cancels the handler's task
        ctx.log.warning("stopping on request")
        raise
    return b""


async def _pushed_back(ctx: JobContext) -> bytes:
    raise PushedBack("429", retry_after=WAIT_SECONDS, key="provider:inproc")


async def _pushed_back_until(ctx: JobContext) -> bytes:
    raise PushedBack("quota", until=datetime.now(UTC) + timedelta(seconds=UNTIL_SECONDS))


async def _busy(ctx: JobContext) -> bytes:
    raise RetryableError("busy", retry_after=timedelta(seconds=45))


def _registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register("inproc.echo")(_echo)
    registry.register("inproc.wait")(_until_stopped)
    registry.register("inproc.logs")(_logs_until_stopped)
    registry.register("inproc.pushback")(_pushed_back)
    registry.register("inproc.until")(_pushed_back_until)
    registry.register("inproc.busy")(_busy)
    registry.register("inproc.process", executor="process")(handlers_for_tests.pushed_back_in_a_process)
    return registry


@dataclass
class WorkerUnderTest:
    service: ScriptedWorkerService
    signals: WorkerSignals
    stop: asyncio.Event
    task: asyncio.Task[None]
    metrics: WorkerMetrics
    instance: Worker
    api: ApiClient

    async def wait_for(self, matches: Callable[[SignalRecord], bool], what: str) -> SignalRecord:
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                return await self.signals.wait_for(matches)
        except TimeoutError:
            pytest.fail(f"no signal: {what}; seen {self.signals.records}")

    async def reported(self, job_id: str) -> SignalRecord:
        """The API's answer to the job's report; fails at once when the report never got through."""
        ended = {Signal.REPORTED, Signal.UNREPORTED}
        record = await self.wait_for(lambda r: r.signal in ended and r.job_id == job_id, f"{job_id} reported")
        assert record.signal is Signal.REPORTED, f"not reported: {record.detail}"
        return record

    async def stopped(self) -> None:
        self.stop.set()
        await self.wait_for(lambda r: r.signal is Signal.STOPPED, "stopped")
        async with asyncio.timeout(WAIT_SECONDS):
            await self.task


@pytest.fixture
async def worker(database_url: str, db: Database) -> AsyncIterator[WorkerUnderTest]:
    service = ScriptedWorkerService()
    server = grpc.aio.server()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    settings = WorkerSettings.from_env(
        {
            "DATABASE_URL": database_url,
            "JOBS_API_TARGET": f"127.0.0.1:{port}",
            "JOBS_WORKER_TOKEN": "in-process",
            "JOBS_WORKER_ID": "in-process",
            "JOBS_LEASE_SECONDS": "30",
            "JOBS_POLL_INTERVAL_SECONDS": "0.1",
            "JOBS_SHUTDOWN_GRACE_SECONDS": "0.2",
            "JOBS_COMPLETION_FLUSH_SECONDS": "0.01",
            # Log lines go at once, then not again for a minute: an attempt's last ones go with its report.
            "JOBS_PROGRESS_INTERVAL_SECONDS": "60",
        }
    )
    registry = _registry()
    metrics = WorkerMetrics(tenant_limit=5)
    publisher = KindPublisher(db, registry, settings.worker_id, datetime.now(UTC), metrics)
    await publisher.publish()
    api = ApiClient(settings.api_target, settings.worker_token, settings.worker_id)
    signals = WorkerSignals()
    stop = asyncio.Event()
    instance = Worker(settings, registry, db, api, metrics, publisher, WorkerHealth(), signals=signals)
    task = asyncio.create_task(instance.run(stop))
    under_test = WorkerUnderTest(service, signals, stop, task, metrics, instance, api)
    try:
        yield under_test
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_SECONDS):
            await asyncio.gather(task, return_exceptions=True)
        await api.close()
        await server.stop(grace=None)


async def _submit(db: Database, kind: str, payload: bytes = b"x") -> JobId:
    return (await factories.insert_job(db, kind=kind, payload=payload)).job_id


async def test_a_refused_completion_drops_the_job_without_retrying(worker, db):
    job_id = await _submit(db, "inproc.echo")
    worker.service.completion_answers[job_id] = R.REPORT_OUTCOME_LEASE_LOST

    reported = await worker.reported(job_id)
    await worker.stopped()

    assert (reported.report, reported.detail) == ("completed", "lease_lost")
    assert worker.service.calls["CompleteJobs"] == 1, "a refusal is an answer: nothing to retry"
    assert not worker.service.failures and not worker.service.releases, "the job is dropped, not reported again"
    assert worker.metrics.leases_lost._value.get() == 1


async def test_reports_survive_an_unavailable_api_by_retrying(worker, db):
    worker.service.completion_outages = 3
    job_id = await _submit(db, "inproc.echo", b"kept")

    reported = await worker.reported(job_id)

    assert (reported.report, reported.detail) == ("completed", "accepted")
    assert worker.service.calls["CompleteJobs"] == 4, "three refused calls, then the one that was answered"
    assert [(c.job_id, c.result) for c in worker.service.completions] == [(job_id, b"kept")]
    assert not [r for r in worker.signals.records if r.signal is Signal.UNREPORTED]


async def test_a_graceful_stop_releases_the_jobs_it_holds(worker, db):
    job_ids = {await _submit(db, "inproc.wait") for _ in range(2)}
    for job_id in job_ids:
        await worker.wait_for(lambda r, j=job_id: r.signal is Signal.CLAIMED and r.job_id == j, f"{job_id} claimed")

    await worker.stopped()

    released = {r.job_id: r for r in worker.service.releases}
    assert set(released) == job_ids
    assert all(not r.started and r.reason == "worker shutting down" for r in released.values())
    assert worker.service.calls["ReleaseJobs"] >= 1 and not worker.service.completions
    remaining = worker.service.release_time_remaining
    # The release's own deadline (5 s), not the 10 s a call may take at most; a second of slack for the
    # two clocks' reading of it.
    assert all(r is not None and r <= RELEASE_DEADLINE_SECONDS + 1 for r in remaining), (
        "a call never outlives its report's deadline",
        remaining,
    )


async def test_a_replica_that_cannot_reach_the_api_still_stops_when_asked(worker):
    """Claims wait while the API is unreachable; a wake left pending then (a notification of new work)
    must not end every wait at once, or the claim loop never yields and nothing else runs, the stop
    neither (pytest-timeout ends the test)."""
    async with asyncio.timeout(WAIT_SECONDS):
        await worker.api.reachable.wait()  # its loops started: the first heartbeat found the API
    worker.api.reachable.clear()
    worker.instance.wake()
    await asyncio.sleep(0.3)  # several polls: the heartbeat, due in 10 s, does not mark it reachable again
    assert not worker.api.reachable.is_set()
    await worker.stopped()


async def test_a_cancel_is_one_release_call_that_carries_the_last_log_lines(worker, db, sync_db):
    job_id = await _submit(db, "inproc.logs")
    await worker.wait_for(lambda r: r.signal is Signal.CLAIMED and r.job_id == job_id, "claimed")
    # Its first line goes at once, the next not for a minute: once it arrived, a later call that names the
    # job is the cancel's. (The Heartbeat that tells of the cancel is logged here when it arrives, before
    # the worker reads its answer: a first send still under way then would come after it.)
    async with asyncio.timeout(WAIT_SECONDS):
        await worker.service.lines_arrived.wait()
    assert worker.service.shipped_lines == ["started the long part"]
    worker.service.cancel_requested.add(job_id)
    # The stop trigger's notification makes the worker ask at once rather than at its next heartbeat.
    sync_db.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (job_id,))

    reported = await worker.reported(job_id)

    assert (reported.report, reported.detail) == ("released", "cancelled")
    learned = max(i for i, (call, jobs) in enumerate(worker.service.log) if call == "Heartbeat" and job_id in jobs)
    after = [(call, jobs) for call, jobs in worker.service.log[learned + 1 :] if job_id in jobs]
    assert after == [("ReleaseJobs", [job_id])], "one call after the worker learned of the cancel"
    (release,) = worker.service.releases
    assert release.started and release.reason == "cancelled on request"
    shipped = [*worker.service.shipped_lines, *(line.message for line in release.last_lines)]
    assert shipped == ["started the long part", "stopping on request"]
    assert [line.sequence for line in release.last_lines] == list(range(3 - len(release.last_lines), 3))
    assert not worker.service.failures, "a cancel is no failure"


async def test_pushbacks_and_retry_hints_carry_their_fields(worker, db):
    pushed = await _submit(db, "inproc.pushback")
    until = await _submit(db, "inproc.until")
    busy = await _submit(db, "inproc.busy")
    in_process = await _submit(db, "inproc.process")
    for job_id in (pushed, until, busy, in_process):
        await worker.reported(job_id)

    sent = {f.job_id: f for f in worker.service.failures}
    assert sent[pushed].pushed_back and sent[pushed].limit_key == "provider:inproc"
    assert sent[pushed].retry_after.ToTimedelta() == timedelta(seconds=WAIT_SECONDS)
    assert sent[pushed].error.category == jobs_pb2.ERROR_CATEGORY_RETRYABLE
    assert sent[until].pushed_back and sent[until].limit_key == ""
    assert timedelta(0) < sent[until].retry_after.ToTimedelta() <= timedelta(seconds=UNTIL_SECONDS)
    assert not sent[busy].pushed_back and sent[busy].retry_after.ToTimedelta() == timedelta(seconds=45)
    assert sent[in_process].pushed_back and sent[in_process].limit_key == "provider:process"
    assert sent[in_process].retry_after.ToTimedelta() == timedelta(seconds=75)
    pushed_signal = await worker.reported(pushed)
    assert (pushed_signal.report, pushed_signal.detail) == ("failed", "pending")
