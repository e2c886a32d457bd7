"""The worker loop: claim up to the free slots, run handlers, keep leases alive, report, drain on stop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import functools
import logging
import os
import random
import time
import traceback
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, replace

from durable_jobs.handlers import (
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    PermanentError,
    PushedBack,
    RetryableError,
    StopSignal,
)
from shared.domain.errors import JobsError, LeaseLost
from shared.domain.jobs import (
    ChildJob,
    ClaimedJob,
    Completion,
    ErrorCategory,
    FailureReport,
    JobError,
    JobState,
    LeaseRef,
    LeaseStatus,
    ReleaseReport,
    ReportOutcome,
    RetryHint,
)
from shared.domain.results import result_too_large
from shared.domain.trace_context import TraceContext
from shared.pause import wait_at_most
from shared.storage import checkpoint_store, lease_store
from shared.storage.database import Database
from worker_service.api_client import ApiClient, ApiUnreachable
from worker_service.background_loops import (
    apply_retention,
    fold_key_charges,
    listen_for_work,
    rescue_leases,
    tend_running_tallies,
)
from worker_service.completion_batcher import CompletionBatcher
from worker_service.handler_executors import HandlerExecutors, HandlerProcessFailed
from worker_service.health_server import WorkerHealth
from worker_service.kind_publisher import KindPublisher
from worker_service.lease_services import LeaseServices, ReplicaMeans, replica_means
from worker_service.log_shipper import LeaseLog, LogShipper
from worker_service.metrics import AttemptOutcome, WorkerMetrics
from worker_service.progress_reporter import ProgressReporter
from worker_service.settings import WorkerSettings
from worker_service.tracing import NO_SPAN, AttemptSpan, AttemptTracer
from worker_service.worker_signals import Signal, SignalRecord, WorkerSignals

log = logging.getLogger(__name__)
RELEASE_DEADLINE_SECONDS = 5.0
# How long a stop waits for the background loops to end once cancelled: each ends at its next await.
BACKGROUND_STOP_SECONDS = 5.0
# Frames of an unclassified exception's traceback kept with the attempt's error.
TRACEBACK_FRAMES_MAX = 20
# Frames above a handler's own: this package's and the executors' of the standard library.
_MACHINERY_PATHS = (
    os.path.dirname(__file__) + os.sep,
    os.path.dirname(asyncio.__file__) + os.sep,
    os.path.dirname(concurrent.futures.__file__) + os.sep,
)
_FAIL_OUTCOME_LABELS = {
    JobState.RETRY_WAIT: AttemptOutcome.RETRIED,
    JobState.FAILED: AttemptOutcome.FAILED,
    JobState.OUTCOME_UNKNOWN: AttemptOutcome.OUTCOME_UNKNOWN,
    JobState.CANCELLED: AttemptOutcome.CANCELLED,
    JobState.PENDING: AttemptOutcome.PUSHED_BACK,
}
_REFUSAL_LABELS = {
    ReportOutcome.LEASE_LOST: AttemptOutcome.LEASE_LOST,
    ReportOutcome.JOB_CANCELLED: AttemptOutcome.CANCELLED,
    ReportOutcome.JOB_SUPERSEDED: AttemptOutcome.SUPERSEDED,
    ReportOutcome.RESOURCE_DELETED: AttemptOutcome.RESOURCE_DELETED,
    # The API's result limit is lower than this replica's: the API failed the attempt instead.
    ReportOutcome.RESULT_TOO_LARGE: AttemptOutcome.FAILED,
    # The API refused a spawned job (its kind unknown to the API, say): it failed the attempt instead.
    ReportOutcome.CHILDREN_REFUSED: AttemptOutcome.FAILED,
}


class StopReason(enum.StrEnum):
    CANCEL_REQUESTED = "cancel_requested"  # still held: released, so the job ends CANCELLED
    ENDED_ELSEWHERE = "ended_elsewhere"  # cancelled or superseded while we were not looking
    LEASE_LOST = "lease_lost"
    # Heartbeats kept failing until the lease ran out by this replica's clock: another replica may run
    # the job by now, and a report would be refused, so the handler stops and nothing is reported.
    LEASE_EXPIRED = "lease_expired"
    SHUTDOWN = "shutdown"


# Stops after which this replica still holds the lease and hands the job back.
_RELEASED_ON_STOP = frozenset({StopReason.CANCEL_REQUESTED, StopReason.SHUTDOWN})


@dataclass(slots=True)
class ActiveJob:
    claimed: ClaimedJob
    context: JobContext
    lease: LeaseRef
    # Monotonic time by which the lease has surely run out unless a heartbeat extends it: taken after
    # the claim or heartbeat answer that set it, so it is never earlier than the database's expiry.
    lease_deadline: float
    task: asyncio.Task[None] | None = None
    # The runner has begun. A task cancelled before its first step never runs its body, cleanup and
    # report included: a stop that comes sooner (a replica thawed with a claim and a refused heartbeat in
    # one turn of the loop) is left for the runner to find.
    started: bool = False
    stop_reason: StopReason | None = None
    # Once the handler returned, the report goes out whatever the heartbeats say: fencing decides.
    reporting: bool = False
    span: AttemptSpan = NO_SPAN

    @property
    def log_fields(self) -> dict[str, object]:
        """The job's fields for a log record: made when a record is, not for every job."""
        job = self.claimed
        return {
            "job_id": job.job_id,
            "tenant": job.tenant,
            "kind": job.kind,
            "attempt": job.attempt,
            "fencing_token": job.fencing_token,
        }


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        registry: HandlerRegistry,
        db: Database,
        api: ApiClient,
        metrics: WorkerMetrics,
        publisher: KindPublisher,
        health: WorkerHealth,
        tracer: AttemptTracer | None = None,
        signals: WorkerSignals | None = None,
    ) -> None:
        self._settings = settings
        self._signals = signals
        self._tracer = tracer or AttemptTracer()
        self._publisher = publisher
        self._health = health
        self._draining = False
        self._registry = registry
        self._db = db
        self._api = api
        self._metrics = metrics
        metrics.know_kinds(registry.kinds())
        self._batcher = CompletionBatcher(
            api,
            flush_seconds=settings.completion_flush_seconds,
            batch_max=settings.completion_batch_max,
            calls_max=settings.completion_calls_max,
        )
        self._progress = ProgressReporter(api, interval_seconds=settings.progress_interval_seconds)
        self._logs = LogShipper(api, interval_seconds=settings.progress_interval_seconds)
        self._active: dict[str, ActiveJob] = {}
        # Set while no job is held: a job ends at its report's answer, which may come after its task ended.
        self._settled = asyncio.Event()
        self._settled.set()
        # Read when scraped: set at every claim and every job's end it took a lock per job.
        metrics.in_flight.set_function(lambda: len(self._active))
        # Twice the slots: a plain handler that ignores its stop keeps its thread after its slot is freed.
        self._executors = HandlerExecutors(threads=2 * settings.concurrency, preload_modules=settings.handler_modules)
        self._wake = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        # Set when a lease deadline appears that the expiry watch may not be waiting for yet.
        self._new_lease = asyncio.Event()
        # A background duty that died (a refused credential, a bug) stops the replica.
        self._fatal: BaseException | None = None
        # Taken once by run(): asking asyncio for the running loop at every job's start was several
        # lookups per job.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._means: ReplicaMeans | None = None

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Works until `stop` is set, then drains: running jobs get the grace period, the rest are released."""
        self._loop = asyncio.get_running_loop()
        background = [
            asyncio.create_task(self._batcher.run(), name="completion-batcher"),
            asyncio.create_task(self._progress.run(), name="progress-reporter"),
            asyncio.create_task(self._logs.run(), name="log-shipper"),
            asyncio.create_task(self._keep_leases(), name="lease-keeper"),
            asyncio.create_task(self._stop_expired_leases(), name="lease-expiry"),
            asyncio.create_task(self._publisher.keep_published(), name="kind-publisher"),
            asyncio.create_task(
                self._health.watch(self._db.ping, self._api.reachable.is_set, lambda: self._draining), name="health"
            ),
            asyncio.create_task(
                rescue_leases(self._db, self._metrics, self._settings.rescue_interval_seconds), name="lease-rescuer"
            ),
            asyncio.create_task(
                fold_key_charges(self._db, self._settings.rescue_interval_seconds), name="key-charges-folder"
            ),
            asyncio.create_task(
                tend_running_tallies(self._db, self._metrics, self._settings.rescue_interval_seconds),
                name="running-tallies",
            ),
        ]
        if self._settings.database.session_url is not None:
            background.append(
                asyncio.create_task(
                    listen_for_work(
                        self._settings.database.session_url, self.wake, self._stop_notified, self._db.watch
                    ),
                    name="wakeup-listener",
                )
            )
        else:
            # A transaction pooler without a direct URL: claims come from polling, stops from heartbeats.
            log.info(
                "no database session for LISTEN: polling for work every %.1fs", self._settings.poll_interval_seconds
            )
        if self._settings.retention_seconds > 0:
            background.append(
                asyncio.create_task(
                    apply_retention(
                        self._db, self._settings.retention_seconds, self._settings.retention_interval_seconds
                    ),
                    name="retention",
                )
            )
        for task in background:
            task.add_done_callback(self._on_background_done)
        stop_waiter = asyncio.create_task(stop.wait())
        stop_waiter.add_done_callback(lambda _: self.wake())
        everything: list[asyncio.Task[object]] = [*background, stop_waiter]
        try:
            await self._claim_until(stop)
            self._draining = True
            await self._drain()
        finally:
            for pending in everything:
                pending.cancel()
            _, stuck = await asyncio.wait(everything, timeout=BACKGROUND_STOP_SECONDS)
            if stuck:
                # A stop must not wait on a loop that missed its cancel: left behind, it ends with the loop.
                log.warning("stopped without waiting for %s", ", ".join(sorted(t.get_name() for t in stuck)))
            self._executors.close()
            self._signal(Signal.STOPPED)
        if self._fatal is not None:
            raise self._fatal

    def _signal(self, signal: Signal, job_id: str = "", report: str = "", detail: str = "") -> None:
        """Made into a record only when a test listens: most replicas never do, and it is per job."""
        if self._signals is not None:
            self._signals.emit(SignalRecord(signal, job_id, report, detail))

    def _stop_notified(self, job_id: str) -> None:
        """A held job was cancelled or superseded: ask the API now rather than at the next heartbeat."""
        if job_id in self._active:
            self._heartbeat_now.set()

    def _on_background_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fatal = task.exception()
            log.error("%s stopped: %r", task.get_name(), self._fatal)
            self.wake()

    async def _claim_until(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and self._fatal is None:
            if not self._api.reachable.is_set():
                # Claiming while reports cannot reach the API would only burn attempts. The wake is
                # cleared first: a wake left set would end every wait at once, and this loop would never
                # yield to the event loop (not even to the stop).
                self._wake.clear()
                await self._wait(self._settings.poll_interval_seconds)
                continue
            self._wake.clear()
            free = self._free_slots()
            if free > 0:
                limit = min(free, self._settings.claim_batch_max)
                claimed = await self._claim(limit)
                self._metrics.count_claims(claimed)
                for job in claimed:
                    self._start(job)
                if claimed and len(claimed) == limit:
                    continue  # there may be more waiting
            if stop.is_set():
                break
            poll = self._settings.poll_interval_seconds * random.uniform(0.5, 1.0)
            await self._wait(poll if free > 0 else None)

    def _free_slots(self) -> int:
        """Slots are handlers running, not leases held: a job whose handler returned frees its slot
        while its report is in flight, so claiming overlaps with reporting. Held leases stay bounded
        (twice the concurrency) when the API is slow to answer."""
        running = sum(1 for active in self._active.values() if not active.reporting)
        return min(self._settings.concurrency - running, 2 * self._settings.concurrency - len(self._active))

    async def _wait(self, seconds: float | None) -> None:
        await wait_at_most(self._wake, seconds)

    async def _claim(self, limit: int) -> list[ClaimedJob]:
        try:
            # One statement in a transaction of its own: one round trip where BEGIN, claim and COMMIT took three.
            claimed = await lease_store.claim_batch_alone(
                self._db,
                worker_id=self._settings.worker_id,
                kinds=sorted(self._registry.kinds()),
                limit=limit,
                lease_seconds=self._settings.lease_seconds,
            )
        except JobsError as exc:
            log.warning("claim failed: %s", exc.message)
            return []
        self._metrics.claim_batch.observe(len(claimed))
        if not any(job.leased_before for job in claimed):
            return claimed  # the usual batch: every job on its first lease has no stage to skip
        return await self._with_checkpoints(claimed)

    async def _with_checkpoints(self, claimed: list[ClaimedJob]) -> list[ClaimedJob]:
        """The stages that jobs leased before have finished, for their handlers to skip: one statement
        per batch. When it fails, those jobs are handed back unstarted (their attempt not counted) rather
        than run without their checkpoints, and the next claim takes them again."""
        leased_before = [job for job in claimed if job.leased_before]
        try:
            async with self._db.transaction() as conn:
                done = await checkpoint_store.for_jobs(conn, [job.job_id for job in leased_before])
        except JobsError as exc:
            log.warning("reading checkpoints failed: %s; handing %d jobs back", exc.message, len(leased_before))
            await self._hand_back(leased_before, "worker could not read the job's checkpoints")
            return [job for job in claimed if not job.leased_before]
        return [replace(job, checkpoints=done[job.job_id]) if job.job_id in done else job for job in claimed]

    async def _hand_back(self, jobs: list[ClaimedJob], reason: str) -> None:
        """Releases claimed jobs that were never started; unanswered, their leases run out instead."""
        reports = [ReleaseReport(LeaseRef(job.job_id, job.fencing_token), False, reason) for job in jobs]
        try:
            await self._api.release_many(reports, deadline=time.monotonic() + RELEASE_DEADLINE_SECONDS)
        except ApiUnreachable as exc:
            log.warning("could not hand %d jobs back (%s); their leases will expire", len(jobs), exc)

    def _start(self, job: ClaimedJob) -> None:
        loop = self._loop or asyncio.get_running_loop()
        lease = LeaseRef(job.job_id, job.fencing_token)
        services = LeaseServices(self._means or self._take_means(), lease)
        trace = job.trace_context
        # In the fields' order, not by name: a call of 15 keywords took twice as long (1.4 against 0.7 us),
        # once per job. The types tell each argument from its neighbours, so mypy catches a reordering.
        context = JobContext(
            job.job_id,
            job.tenant,
            job.kind,
            job.payload,
            job.attempt,
            job.max_attempts,
            job.fencing_token,
            StopSignal(),
            services,  # receipt_book
            trace.traceparent if trace else None,
            trace.tracestate if trace else None,
            {checkpoint.stage: checkpoint for checkpoint in job.checkpoints} if job.checkpoints else {},
            services,  # checkpoint_book
            services,  # progress_sink
            services,  # dependency_source
            self._logs.sink(lease),
        )
        active = ActiveJob(job, context, lease, time.monotonic() + self._settings.lease_seconds)
        self._active[job.job_id] = active
        self._settled.clear()
        self._new_lease.set()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("claimed", extra=active.log_fields)
        self._signal(Signal.CLAIMED, job.job_id)
        active.task = loop.create_task(self._run(active), name=f"job-{job.job_id}")

    def _take_means(self) -> ReplicaMeans:
        """What every attempt's services share; made at the first job's start, on the event loop."""
        self._means = replica_means(
            self._db, self._api, self._progress, self._settings.lease_seconds, self._report_deadline
        )
        return self._means

    async def _run(self, active: ActiveJob) -> None:
        active.started = True
        answered_later = False
        try:
            with self._tracer.attempt(active.claimed) as active.span:
                # Observed inside the attempt's span, so the observation can name its trace.
                job = active.claimed
                waited = max((job.claimed_at - job.queued_since).total_seconds(), 0.0)
                self._metrics.observe_queue_wait(job.kind, waited, active.span.exemplar())
                answered_later = await self._execute_and_report(active)
        except Exception:  # noqa: BLE001 - one job's bug must not stop the replica
            log.exception("job runner failed", extra=active.log_fields)
        finally:
            if not answered_later:
                self._end(active)

    def _end(self, active: ActiveJob) -> None:
        """The job is no longer this replica's: its report was answered (or never will be)."""
        self._progress.forget(active.claimed.job_id)
        self._logs.forget(active.claimed.job_id)
        self._active.pop(active.claimed.job_id, None)
        if not self._active:
            self._settled.set()
        self.wake()

    async def _execute_and_report(self, active: ActiveJob) -> bool:
        """True when the job's completion is queued and its answer will end the job, not this task."""
        job = active.claimed
        stopped_before = active.stop_reason
        if stopped_before is not None:  # stopped before it began: the handler never runs
            await self._after_stop(active, stopped_before)
            return False
        spec = self._registry.get(job.kind)
        started = time.monotonic()
        hint: RetryHint | None = None
        try:
            result = _as_bytes(await active.span.record(self._invoke(spec, active.context)))
            error = None
        except asyncio.CancelledError:
            reason = active.stop_reason
            if reason is None:
                raise
            _uncancel_current_task()
            self._metrics.observe_execution(job.kind, time.monotonic() - started, active.span.exemplar())
            # A release carries the last lines itself.
            if reason not in _RELEASED_ON_STOP and self._lines_left(active):
                await self._logs.flush(job.job_id)
            await self._after_stop(active, reason)
            return False
        except LeaseLost:
            # A receipt write found the lease gone: the job belongs to a newer attempt now.
            active.stop_reason = StopReason.LEASE_LOST
            active.span.stopped(StopReason.LEASE_LOST.value)
            await self._after_stop(active, StopReason.LEASE_LOST)
            return False
        except PushedBack as exc:
            error = JobError(ErrorCategory.RETRYABLE, str(exc) or "pushed back")
            hint = RetryHint(exc.wait_seconds(), pushed_back=True, limit_key=exc.key)
        except HandlerError as exc:
            error = JobError(exc.category, str(exc) or type(exc).__name__)
            if isinstance(exc, RetryableError) and exc.retry_after_seconds is not None:
                hint = RetryHint(exc.retry_after_seconds)
        except _AttemptTimedOut as exc:
            error = exc.error
        except Exception as exc:  # noqa: BLE001 - unclassified failures are retryable by contract
            error = _unclassified(exc, active.context)
        self._metrics.observe_execution(job.kind, time.monotonic() - started, active.span.exemplar())
        if error is not None:
            active.span.failed(error)
        active.reporting = True
        self.wake()  # the slot is free for the next claim
        if self._progress.holds(job.job_id):
            await self._progress.flush(job.job_id)
        if self._lines_left(active):
            await self._logs.flush(job.job_id)
        if error is None:
            return await self._report_completion(active, result)
        await self._report_failure(active, error, hint)
        return False

    def _lines_left(self, active: ActiveJob) -> bool:
        """Closes the attempt's log; whether lines are left to flush. The attempt's last lines go before
        its report: after it, the lease no longer admits them. Most jobs log nothing: no flush to await."""
        if isinstance(active.context.log_sink, LeaseLog):
            active.context.log_sink.close()
        return self._logs.holds(active.claimed.job_id)

    def _invoke(self, spec: HandlerSpec | None, context: JobContext) -> Awaitable[object]:
        """The handler's run; a coroutine of its own only when a timeout bounds it."""
        if spec is None:
            raise PermanentError(f"no handler for kind {context.kind!r} in this replica")
        if spec.policy.timeout_seconds is None:
            return self._executors.run(spec, context)
        return self._timed(spec, context, spec.policy.timeout_seconds)

    async def _timed(self, spec: HandlerSpec, context: JobContext, timeout_seconds: float) -> object:
        try:
            async with asyncio.timeout(timeout_seconds) as scope:
                return await self._executors.run(spec, context)
        except TimeoutError:
            if not scope.expired():
                raise
            message = f"timed out after {timeout_seconds:g}s"
            if spec.policy.external_side_effects:
                raise _AttemptTimedOut(JobError(ErrorCategory.OUTCOME_UNKNOWN, message)) from None
            raise _AttemptTimedOut(_unless_unconfirmed(message, context)) from None

    def _report_deadline(self) -> float:
        return time.monotonic() + self._settings.lease_seconds

    async def _report_completion(self, active: ActiveJob, result: bytes) -> bool:
        """True when the completion is queued for the batcher, whose answer ends the job. An untraced
        attempt's task ends there: waking it again for the answer was a second step and a future per
        job. A traced one waits, so that the answer is logged and counted inside the attempt's span."""
        too_large = result_too_large(len(result), self._settings.max_result_bytes)
        if too_large is not None:
            # Never sent: the API would refuse it, and another attempt would return as much again.
            active.span.failed(JobError(ErrorCategory.PERMANENT, too_large))
            await self._report_failure(active, JobError(ErrorCategory.PERMANENT, too_large))
            return False
        completion = Completion(
            active.lease.job_id, active.lease.fencing_token, result, spawned_children(active.context)
        )
        if active.span is NO_SPAN:
            answer = functools.partial(self._answered_later, active)
            self._batcher.submit(completion, deadline=self._report_deadline(), answer=answer)
            return True
        try:
            outcome: ReportOutcome | ApiUnreachable = await self._batcher.complete(
                completion, deadline=self._report_deadline()
            )
        except ApiUnreachable as exc:
            outcome = exc
        self._completion_answered(active, outcome)
        return False

    def _completion_answered(self, active: ActiveJob, outcome: ReportOutcome | ApiUnreachable) -> None:
        job = active.claimed
        if isinstance(outcome, ApiUnreachable):
            self._unreported(active, outcome)
            return
        if self._signals is not None:  # an enum's value is a third of a microsecond, and this is per job
            self._signal(Signal.REPORTED, job.job_id, "completed", outcome.value)
        if outcome is ReportOutcome.ACCEPTED:
            self._metrics.count_outcome(job.tenant, job.kind, AttemptOutcome.SUCCEEDED)
            if log.isEnabledFor(logging.INFO):  # its fields make a dict per job: only for a record kept
                log.info("job succeeded", extra={**active.log_fields, "state": "succeeded"})
        else:
            self._refused(active, outcome)

    def _answered_later(self, active: ActiveJob, outcome: ReportOutcome | ApiUnreachable) -> None:
        """The batcher's answer to a completion whose task has ended: the job's end, as the task's would be."""
        try:
            self._completion_answered(active, outcome)
        except Exception:  # noqa: BLE001 - one job's bug must not stop the batcher
            log.exception("job runner failed", extra=active.log_fields)
        finally:
            self._end(active)

    async def _report_failure(self, active: ActiveJob, error: JobError, hint: RetryHint | None = None) -> None:
        job = active.claimed
        report = FailureReport(active.lease, error, hint)
        outcome = await self._answer(active, "failed", self._api.fail(report, deadline=self._report_deadline()))
        if outcome is None:
            return
        self._metrics.count_outcome(job.tenant, job.kind, _FAIL_OUTCOME_LABELS.get(outcome, AttemptOutcome.FAILED))
        # A failure report that found a cancel requested ended the job CANCELLED: no failure; nor is a pushback.
        if outcome is not JobState.CANCELLED and not (hint and hint.pushed_back):
            self._metrics.count_failure(job.tenant, job.kind, error.category.value)
        log.info(
            "attempt pushed back (%s): %s" if hint and hint.pushed_back else "attempt failed (%s): %s",
            error.category.value,
            error.message[:200],
            extra={
                **active.log_fields,
                "state": outcome.value,
                **({"traceback": error.traceback} if error.traceback else {}),
            },
        )

    async def _after_stop(self, active: ActiveJob, reason: StopReason) -> None:
        job = active.claimed
        if reason in _RELEASED_ON_STOP:
            await self._release(active, reason)
            return
        if reason is StopReason.LEASE_EXPIRED:
            self._metrics.leases_lost.inc()
            self._metrics.count_outcome(job.tenant, job.kind, AttemptOutcome.LEASE_LOST)
            log.warning("stopped: lease expired with no heartbeat answered; not reported", extra=active.log_fields)
            return
        if reason is StopReason.LEASE_LOST:
            self._metrics.leases_lost.inc()
        outcome = AttemptOutcome.LEASE_LOST if reason is StopReason.LEASE_LOST else AttemptOutcome.ENDED
        self._metrics.count_outcome(job.tenant, job.kind, outcome)
        log.info("stopped: %s", reason.value, extra=active.log_fields)

    async def _release(self, active: ActiveJob, reason: StopReason) -> None:
        """Hands the job back in one call that carries the attempt's last log lines. A cancel is what it
        is, a release, and the job ends CANCELLED, not failed. An interruption by this replica's shutdown
        is not the job's failure either: the attempt is not counted, unless it recorded a receipt, and an
        unconfirmed external call sends the job to OUTCOME_UNKNOWN (the release statement decides)."""
        job = active.claimed
        if isinstance(active.context.log_sink, LeaseLog):
            active.context.log_sink.close()
        cancel = reason is StopReason.CANCEL_REQUESTED
        report = ReleaseReport(
            active.lease,
            started=cancel,
            reason="cancelled on request" if cancel else "worker shutting down",
            last_lines=await self._logs.take(job.job_id),
        )
        deadline = self._report_deadline() if cancel else time.monotonic() + RELEASE_DEADLINE_SECONDS
        state = await self._answer(active, "released", self._api.release(report, deadline=deadline))
        if state is None:
            return
        label = AttemptOutcome.CANCELLED if state is JobState.CANCELLED else AttemptOutcome.RELEASED
        self._metrics.count_outcome(job.tenant, job.kind, label)
        log.info("released: %s", report.reason, extra={**active.log_fields, "state": state.value})

    async def _answer(
        self, active: ActiveJob, report: str, call: Coroutine[None, None, JobState | ReportOutcome]
    ) -> JobState | None:
        """Where a report left the job; None when it was refused or never answered, each dealt with here."""
        try:
            answer = await call
        except ApiUnreachable as exc:
            self._unreported(active, exc)
            return None
        self._signal(Signal.REPORTED, active.claimed.job_id, report, answer.value)
        if isinstance(answer, ReportOutcome):
            self._refused(active, answer)
            return None
        return answer

    def _refused(self, active: ActiveJob, outcome: ReportOutcome) -> None:
        self._metrics.count_outcome(active.claimed.tenant, active.claimed.kind, _REFUSAL_LABELS[outcome])
        if outcome is ReportOutcome.LEASE_LOST:
            self._metrics.leases_lost.inc()
        log.warning("report refused: %s; job dropped", outcome.value, extra=active.log_fields)

    def _unreported(self, active: ActiveJob, exc: Exception) -> None:
        job = active.claimed
        self._metrics.count_outcome(job.tenant, job.kind, AttemptOutcome.UNREPORTED)
        self._signal(Signal.UNREPORTED, job.job_id, detail=str(exc))
        log.warning("could not report (%s); the lease will expire and the job run again", exc, extra=active.log_fields)

    def _stop(self, active: ActiveJob, reason: StopReason) -> None:
        if active.reporting or active.stop_reason is not None or active.task is None:
            return
        active.stop_reason = reason
        if reason in _RELEASED_ON_STOP:
            self._logs.hold(active.claimed.job_id)
        active.span.stopped(reason.value)
        active.context.stop_requested.set()
        if active.started:
            active.task.cancel()

    async def _keep_leases(self) -> None:
        """Extends every held lease in one Heartbeat call per interval (sooner when a stop was
        notified); also probes the API when idle."""
        interval = self._settings.heartbeat_interval_seconds
        while True:
            self._heartbeat_now.clear()
            actives = list(self._active.values())
            sent_at = time.monotonic()
            try:
                statuses = await self._api.heartbeat(
                    [a.lease for a in actives], self._settings.lease_seconds, deadline=sent_at + interval
                )
            except ApiUnreachable as exc:
                log.warning("heartbeat failed: %s", exc)
            else:
                answered_at = time.monotonic()
                self._metrics.heartbeat_seconds.observe(answered_at - sent_at)
                self._apply(actives, statuses, answered_at)
            await wait_at_most(self._heartbeat_now, max(interval - (time.monotonic() - sent_at), 0.0))

    def _apply(self, actives: list[ActiveJob], statuses: Sequence[LeaseStatus], answered_at: float) -> None:
        for active, status in zip(actives, statuses, strict=True):
            if status.outcome is ReportOutcome.ACCEPTED and not status.cancel_requested:
                active.lease_deadline = answered_at + self._settings.lease_seconds
            elif status.outcome is ReportOutcome.ACCEPTED:
                self._stop(active, StopReason.CANCEL_REQUESTED)
            elif status.outcome is ReportOutcome.LEASE_LOST:
                self._stop(active, StopReason.LEASE_LOST)
            else:
                self._stop(active, StopReason.ENDED_ELSEWHERE)

    async def _stop_expired_leases(self) -> None:
        """Stops each running handler whose lease ran out by this replica's clock, which happens only
        while heartbeats fail (the API unreachable or hung). Runs apart from the heartbeat loop, whose
        call may itself be what hangs."""
        while True:
            self._new_lease.clear()
            now = time.monotonic()
            upcoming = []
            for active in list(self._active.values()):
                if active.reporting or active.stop_reason is not None:
                    continue
                if active.lease_deadline <= now:
                    self._stop(active, StopReason.LEASE_EXPIRED)
                else:
                    upcoming.append(active.lease_deadline)
            await wait_at_most(self._new_lease, min(upcoming) - now if upcoming else None)

    async def _drain(self) -> None:
        """Said in the log at both ends, so that an operator watching a stop knows it is not hung. Waits
        for the jobs, not their tasks: a completed job's task ends once its completion is queued, and the
        job once the batcher has its answer."""
        started = time.monotonic()
        held = len(self._active)
        log.info(
            "draining: no new claims; %d running jobs get up to %.0fs to finish",
            held,
            self._settings.shutdown_grace_seconds,
        )
        await wait_at_most(self._settled, self._settings.shutdown_grace_seconds)
        unfinished = list(self._active.values())
        for active in unfinished:
            self._stop(active, StopReason.SHUTDOWN)
        await wait_at_most(self._settled, RELEASE_DEADLINE_SECONDS + 1)
        log.info(
            "drained in %.1fs: %d jobs finished, %d handed back",
            time.monotonic() - started,
            held - len(unfinished),
            len(unfinished),
        )


def spawned_children(context: JobContext) -> tuple[ChildJob, ...]:
    """What the attempt spawned, in the trace the job was submitted in."""
    if not context.spawned:
        return ()
    trace = TraceContext(context.traceparent, context.tracestate) if context.traceparent else None
    return tuple(ChildJob.of(spawned, trace) for spawned in context.spawned)


def _uncancel_current_task() -> None:
    """Takes back the cancel that stopped a handler, so asyncio.timeout() and the like in the report
    that follows do not see it pending."""
    task = asyncio.current_task()
    if task is not None:  # always a job's task; outside one there is no cancel to undo
        task.uncancel()


class _AttemptTimedOut(Exception):
    def __init__(self, error: JobError) -> None:
        super().__init__(error.message)
        self.error = error


def _unclassified(exc: Exception, context: JobContext) -> JobError:
    """An exception the handler did not classify, with the handler's own frames of its traceback."""
    if isinstance(exc, HandlerProcessFailed):
        type_name, trace = exc.type_name, exc.traceback_text
    else:
        type_name, trace = type(exc).__name__, _bounded_traceback(exc)
    return _unless_unconfirmed(f"{type_name}: {exc}", context, trace)


def _unless_unconfirmed(message: str, context: JobContext, trace: str = "") -> JobError:
    """A failure the handler did not classify (an exception, a timeout) is retryable, unless an external
    call of this attempt is unconfirmed: then its effect may have happened, and only a person should
    decide to run it again."""
    if context.unconfirmed_steps:
        steps = ", ".join(sorted(context.unconfirmed_steps))
        message = f"{message} (after unconfirmed external call: {steps})"
        return JobError(ErrorCategory.OUTCOME_UNKNOWN, message, trace)
    return JobError(ErrorCategory.RETRYABLE, message, trace)


def _bounded_traceback(exc: BaseException) -> str:
    """The innermost frames of the handler's exception: where it failed, not the worker's machinery."""
    frames = traceback.extract_tb(exc.__traceback__)
    while frames and frames[0].filename.startswith(_MACHINERY_PATHS):
        frames.pop(0)
    innermost = frames[-TRACEBACK_FRAMES_MAX:]
    return "".join([*traceback.StackSummary.from_list(innermost).format(), *traceback.format_exception_only(exc)])


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if value is None:
        return b""
    raise PermanentError(f"handler returned {type(value).__name__}; expected bytes")
