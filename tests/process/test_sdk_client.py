"""durable_jobs.Client and AsyncClient against the real API and workers: submissions keyed and sent again
after an answer that was lost, results and watches as plain calls, errors as JobsError subclasses."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from datetime import timedelta

import grpc
import psycopg
import pytest

from durable_jobs import AsyncClient, Client, JobState, Submission
from durable_jobs.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    JobNotSucceeded,
    NotFound,
    Unauthenticated,
    Unavailable,
)
from tests.process_fixtures import ServiceStack, free_port, tenant_token

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}
SUBMIT_METHOD = "/jobs.v1.JobService/SubmitJob"


@pytest.fixture(scope="module")
def running(module_service_stack: ServiceStack) -> ServiceStack:
    """One API and one worker for the module: each test submits and reads its own jobs."""
    module_service_stack.start_api()
    module_service_stack.start_worker("w1", **TEST_HANDLERS)
    return module_service_stack


@pytest.fixture
def client(running: ServiceStack) -> Iterator[Client]:
    with Client(running.api_target, tenant_token("acme"), timeout=20) as jobs:
        yield jobs


def test_submit_makes_a_key_and_result_waits_for_the_job(client: Client) -> None:
    job = client.submit("echo", {"hello": "world"})
    assert job.state in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED)
    assert job.idempotency_key.startswith("sdk:")
    assert client.result(job.job_id, wait=True, timeout=60) == b'{"hello":"world"}'
    done = client.get(job.job_id)
    assert done.state is JobState.SUCCEEDED and done.finished_at is not None and done.attempts == 1
    states = [seen.state for seen in client.watch(job.job_id, timeout=30)]
    assert states[-1] is JobState.SUCCEEDED


def test_the_same_key_names_the_same_job_and_a_different_request_under_it_is_already_exists(client: Client) -> None:
    first = client.submit("echo", b"one", idempotency_key="order-17")
    again = client.submit("echo", b"one", idempotency_key="order-17")
    assert again.job_id == first.job_id
    with pytest.raises(AlreadyExists) as refused:
        client.submit("echo", b"two", idempotency_key="order-17")
    assert refused.value.code == "ALREADY_EXISTS"


def test_errors_carry_the_code_reason_and_fields(client: Client, running: ServiceStack) -> None:
    with pytest.raises(InvalidArgument) as invalid:
        client.submit("no.such.kind", b"")
    assert "kind" in invalid.value.fields and "echo" in invalid.value.fields["kind"]
    with pytest.raises(NotFound):
        client.get("01890000-0000-7000-8000-000000000000")
    pending = client.submit("sleep", {"seconds": 30}, run_after=timedelta(hours=1))
    with pytest.raises(FailedPrecondition):
        client.result(pending.job_id)
    cancelled = client.cancel(pending.job_id, "not needed")
    assert cancelled.state is JobState.CANCELLED
    with pytest.raises(JobNotSucceeded) as ended:
        client.result(pending.job_id, wait=True, timeout=30)
    assert ended.value.reason == "JOB_NOT_SUCCEEDED"
    with Client(running.api_target, "not-a-token") as stranger, pytest.raises(Unauthenticated):
        stranger.get(pending.job_id)


def test_a_failed_job_is_retried_with_a_reason(client: Client) -> None:
    job = client.submit("flaky", {"fail_times": 1, "category": "permanent"})
    with pytest.raises(JobNotSucceeded) as failed:
        client.result(job.job_id, wait=True, timeout=60)
    assert failed.value.job.state is JobState.FAILED  # type: ignore[attr-defined]
    again = client.retry(job.job_id, "fixed the input")
    assert again.state in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED)
    assert client.result(job.job_id, wait=True, timeout=60) == b'{"fail_times":1,"category":"permanent"}'


def test_submit_many_keys_every_item(client: Client) -> None:
    jobs = client.submit_many([Submission("echo", f"item {i}") for i in range(3)])
    assert len({job.job_id for job in jobs}) == 3 and all(job.idempotency_key for job in jobs)
    assert [client.result(job.job_id, wait=True, timeout=60) for job in jobs] == [b"item 0", b"item 1", b"item 2"]


@dataclass
class LosingProxy:
    """Forwards SubmitJob to the API; the first `lose` answers are dropped after the API committed them,
    and the caller gets UNAVAILABLE instead, as after a lost reply."""

    upstream: grpc.Channel
    lose: int
    forwarded: int = 0

    def submit(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = tuple((key, value) for key, value in context.invocation_metadata() if key == "authorization")
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.upstream.unary_unary(SUBMIT_METHOD)
        answer: bytes = call(request, metadata=metadata, timeout=10)
        self.forwarded += 1
        if self.forwarded <= self.lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset after the request was sent")
        return answer


@pytest.fixture
def losing_proxy(running: ServiceStack) -> Iterator[tuple[str, LosingProxy]]:
    upstream = grpc.insecure_channel(running.api_target)
    proxy = LosingProxy(upstream, lose=2)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(proxy.submit)  # raw bytes
    service = grpc.method_handlers_generic_handler("jobs.v1.JobService", {"SubmitJob": handler})
    server.add_generic_rpc_handlers([service])
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"127.0.0.1:{port}", proxy
    finally:
        server.stop(grace=None)
        upstream.close()


def test_an_answer_lost_after_the_commit_is_sent_again_and_names_the_same_job(
    losing_proxy: tuple[str, LosingProxy], running: ServiceStack
) -> None:
    target, proxy = losing_proxy
    with Client(target, tenant_token("acme"), timeout=20) as jobs:
        job = jobs.submit("echo", b"exactly once")
    assert proxy.forwarded == 3  # two answers lost, the third one delivered
    with psycopg.connect(running.database_url) as conn:
        rows = conn.execute("SELECT job_id::text FROM jobs WHERE payload = %s", (b"exactly once",)).fetchall()
    assert rows == [(job.job_id,)]


def test_an_api_out_of_reach_is_unavailable_once_the_deadline_passes() -> None:
    with Client(f"127.0.0.1:{free_port()}", "token", timeout=1.5) as jobs, pytest.raises(Unavailable):
        jobs.submit("echo", b"")


def test_the_async_client_has_the_same_calls(running: ServiceStack) -> None:
    async def scenario() -> tuple[bytes, list[JobState], JobState]:
        async with AsyncClient(running.api_target, tenant_token("acme"), timeout=20) as jobs:
            job = await jobs.submit("echo", "async hello")
            result = await jobs.result(job.job_id, wait=True, timeout=60)
            states = [seen.state async for seen in jobs.watch(job.job_id, timeout=30)]
            with pytest.raises(NotFound):
                await jobs.get("01890000-0000-7000-8000-000000000000")
            return result, states, (await jobs.get(job.job_id)).state

    result, states, state = asyncio.run(scenario())
    assert result == b"async hello" and states[-1] is JobState.SUCCEEDED and state is JobState.SUCCEEDED


def test_a_watch_stopped_early_ends_its_stream(client: Client) -> None:
    job = client.submit("sleep", {"seconds": 30})
    seen = threading.Event()
    for state in client.watch(job.job_id, timeout=30):
        seen.set()
        assert state.job_id == job.job_id
        break
    assert seen.is_set()
    assert client.cancel(job.job_id).job_id == job.job_id


def test_the_async_client_cancels_retries_and_reads_history_and_logs(running: ServiceStack) -> None:
    async def scenario() -> tuple[JobState, JobState, list[str], list[str]]:
        async with AsyncClient(running.api_target, tenant_token("acme"), timeout=20) as jobs:
            waiting = await jobs.submit("echo", b"later", run_after=timedelta(hours=1))
            cancelled = await jobs.cancel(waiting.job_id, "not today")
            again = await jobs.retry(waiting.job_id, "today after all")
            reasons = [event.reason for event in await jobs.events(waiting.job_id)]
            logged = await jobs.submit("logs.async")
            await jobs.result(logged.job_id, wait=True, timeout=60)
            lines = [line.message for line in await jobs.logs(logged.job_id, attempt=2)]
            return cancelled.state, again.state, reasons, lines

    cancelled, again, reasons, lines = asyncio.run(scenario())
    assert cancelled is JobState.CANCELLED and again in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED)
    # The retried job runs at once: a worker may claim (and finish) it before its history is read.
    assert reasons[:3] == ["submitted", "cancelled: not today", "manual retry by tenant:acme: today after all"]
    assert set(reasons[3:]) <= {"claimed", "completed"}, reasons
    assert lines == ["attempt 2 of logs.async starting", "a record of the handler's own logger"]
