"""The lifecycle's promises, each proven against the API and workers (in this process). The promises
whose proof kills or hangs a worker's process are in tests/process/test_lifecycle_crashes_e2e.py."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2

from jobs.v1 import jobs_pb2, worker_pb2
from shared.rpc_error_details import rpc_error_details
from shared.storage import lease_store
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = pytest.mark.timeout(180)

S = jobs_pb2.JobState
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}


def _state(client: TenantClient, job_id: str) -> str:
    return S.Name(client.get(job_id).state).removeprefix("JOB_STATE_")


def _wait_state(client: TenantClient, job_id: str, state: str, timeout: float = 30) -> jobs_pb2.Job:
    wait_until(
        lambda: _state(client, job_id) == state, timeout=timeout, interval=0.05, what=f"job {job_id} to be {state}"
    )
    return client.get(job_id)


def _reason(error: grpc.RpcError) -> str:
    details = rpc_error_details(error)
    return details.reason if details is not None else ""


def _events(client: TenantClient, job_id: str) -> list[jobs_pb2.JobEvent]:
    response = client.stub.ListJobEvents(jobs_pb2.ListJobEventsRequest(job_id=job_id), metadata=client.metadata)
    return list(response.events)


def _cancel(client: TenantClient, job_id: str, reason: str = "") -> jobs_pb2.Job:
    return client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason), metadata=client.metadata)


def _retry(client: TenantClient, job_id: str, reason: str, accept: bool = False) -> jobs_pb2.Job:
    return client.stub.RetryJob(
        jobs_pb2.RetryJobRequest(job_id=job_id, reason=reason, accept_duplicate_risk=accept),
        metadata=client.metadata,
    )


def _latest(client: TenantClient, key: str) -> jobs_pb2.GetLatestResultResponse:
    return client.stub.GetLatestResult(jobs_pb2.GetLatestResultRequest(resource_key=key), metadata=client.metadata)


def _sleep(seconds: float) -> bytes:
    return json.dumps({"seconds": seconds}).encode()


@pytest.fixture
def stack(service_stack: ServiceStack) -> ServiceStack:
    service_stack.start_api(**TEST_HANDLERS)
    return service_stack


# --- Retries that end -------------------------------------------------------------------------------


def test_retryable_failures_wait_out_a_backoff_and_stop_at_max_attempts(stack: ServiceStack) -> None:
    stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    job_id = client.submit("quick.flaky", json.dumps({"fail_times": 9}).encode()).job.job_id
    seen_retry_wait = wait_until(
        lambda: job if (job := client.get(job_id)).state == S.JOB_STATE_RETRY_WAIT else None,
        timeout=15,
        interval=0.01,
        what="RETRY_WAIT",
    )
    assert seen_retry_wait.last_error.category == jobs_pb2.ERROR_CATEGORY_RETRYABLE
    assert seen_retry_wait.run_after.ToDatetime() >= seen_retry_wait.started_at.ToDatetime()
    job = _wait_state(client, job_id, "FAILED")
    assert (job.attempts, job.max_attempts) == (3, 3)
    assert [S.Name(e.to_state) for e in _events(client, job_id)].count("JOB_STATE_RUNNING") == 3


def test_no_attempt_starts_after_the_total_deadline(stack: ServiceStack) -> None:
    stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    deadline = timestamp_pb2.Timestamp()
    deadline.FromSeconds(int(time.time()) + 2)
    job_id = client.submit(
        "flaky", json.dumps({"fail_times": 50}).encode(), max_attempts=50, deadline=deadline
    ).job.job_id
    job = _wait_state(client, job_id, "FAILED", timeout=20)
    assert "deadline" in job.last_error.message
    assert job.attempts < 50


def test_handlers_classify_their_failures(stack: ServiceStack) -> None:
    stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    permanent = client.submit("flaky", json.dumps({"fail_times": 1, "category": "permanent"}).encode()).job.job_id
    unknown = client.submit("flaky", json.dumps({"fail_times": 1, "category": "unknown"}).encode()).job.job_id
    unclassified = client.submit("crash.once").job.job_id
    timed_out_external = client.submit("slow.external").job.job_id
    timed_out_internal = client.submit("slow.internal").job.job_id

    assert _wait_state(client, permanent, "FAILED").attempts == 1
    job = _wait_state(client, unknown, "OUTCOME_UNKNOWN")
    assert job.last_error.category == jobs_pb2.ERROR_CATEGORY_OUTCOME_UNKNOWN
    recovered = _wait_state(client, unclassified, "SUCCEEDED")
    assert client.result(unclassified).payload == b"ok on attempt 2"
    assert recovered.last_error.category == jobs_pb2.ERROR_CATEGORY_RETRYABLE
    assert "ValueError" in recovered.last_error.message
    assert _wait_state(client, timed_out_external, "OUTCOME_UNKNOWN").attempts == 1
    job = _wait_state(client, timed_out_internal, "FAILED")
    assert (job.attempts, job.last_error.category) == (2, jobs_pb2.ERROR_CATEGORY_RETRYABLE)
    assert "timed out" in job.last_error.message


def test_a_timeout_after_an_unconfirmed_external_call_is_an_unknown_outcome(stack: ServiceStack) -> None:
    """A kind not registered with external_side_effects, whose attempt timed out between record_intent
    and confirm: the call may have taken effect, so no automatic retry."""
    stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    job_id = client.submit("slow.after_intent").job.job_id

    job = _wait_state(client, job_id, "OUTCOME_UNKNOWN")
    assert (job.attempts, job.last_error.category) == (1, jobs_pb2.ERROR_CATEGORY_OUTCOME_UNKNOWN)
    assert "timed out" in job.last_error.message and "notify" in job.last_error.message


# --- Unknown outcomes and receipts ------------------------------------------------------------------


def test_retry_reopens_a_failed_job_with_a_fresh_budget_and_a_rising_token(stack: ServiceStack) -> None:
    stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    job_id = client.submit(
        "flaky", json.dumps({"fail_times": 1, "category": "permanent"}).encode(), max_attempts=1
    ).job.job_id
    failed = _wait_state(client, job_id, "FAILED")
    assert (failed.attempts, failed.max_attempts, failed.fencing_token) == (1, 1, 1)
    reopened = _retry(client, job_id, "fixed the input")
    assert (reopened.max_attempts, reopened.state) == (2, S.JOB_STATE_PENDING)
    _wait_state(client, job_id, "SUCCEEDED")
    assert (client.result(job_id).attempt, client.result(job_id).fencing_token) == (2, 2)
    with pytest.raises(grpc.RpcError) as refused:
        _retry(client, job_id, "again")
    assert (refused.value.code(), _reason(refused.value)) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_RETRYABLE")


# --- Idempotency, cancellation, versions, dependencies ----------------------------------------------


def test_one_hundred_concurrent_submissions_with_one_key_make_one_job(stack: ServiceStack) -> None:
    client = stack.tenant("acme")
    barrier = threading.Barrier(100)

    def submit(_: int) -> tuple[str, bool]:
        barrier.wait()
        response = client.submit("echo", b"same", idempotency_key="order-42")
        return response.job.job_id, response.created

    with ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(submit, range(100)))
    assert len({job_id for job_id, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1
    with pytest.raises(grpc.RpcError) as refused:
        client.submit("echo", b"different", idempotency_key="order-42")
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with psycopg.connect(stack.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    other_tenant = stack.tenant("globex").submit("echo", b"same", idempotency_key="order-42")
    assert other_tenant.created and other_tenant.job.job_id != answers[0][0]


def test_cancel_waiting_jobs_at_once_and_running_ones_within_a_second(stack: ServiceStack) -> None:
    stack.start_worker("w1", JOBS_LEASE_SECONDS="30")
    client = stack.tenant("acme")
    later = timestamp_pb2.Timestamp()
    later.FromSeconds(int(time.time()) + 3600)
    waiting = client.submit("echo", run_after=later).job.job_id
    assert _cancel(client, waiting, "not needed").state == S.JOB_STATE_CANCELLED

    running = client.submit("sleep", _sleep(60)).job.job_id
    _wait_state(client, running, "RUNNING")
    asked = _cancel(client, running, "user closed the tab")
    assert asked.state == S.JOB_STATE_RUNNING and asked.cancel_requested
    started = time.monotonic()
    _wait_state(client, running, "CANCELLED", timeout=5)
    assert time.monotonic() - started < 1.5
    for job_id in (waiting, running):
        with pytest.raises(grpc.RpcError) as refused:
            client.result(job_id)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as refused:
            _cancel(client, job_id)
        assert (refused.value.code(), _reason(refused.value)) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "JOB_ALREADY_ENDED",
        )


def test_completions_racing_cancels_end_in_exactly_one_terminal_state(stack: ServiceStack) -> None:
    stack.start_worker("w1", JOBS_WORKER_CONCURRENCY="20")
    client = stack.tenant("acme")
    job_ids = [client.submit("sleep", _sleep(0.05 * (i % 8))).job.job_id for i in range(60)]
    for job_id in job_ids:
        try:
            _cancel(client, job_id)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    wait_until(
        lambda: all(_state(client, j) in ("SUCCEEDED", "CANCELLED") for j in job_ids),
        timeout=30,
        what="every job to end",
    )
    with psycopg.connect(stack.database_url) as conn:
        rows = conn.execute(
            "SELECT j.state::text, r.job_id IS NOT NULL FROM jobs j LEFT JOIN job_results r USING (job_id)"
        ).fetchall()
    assert all((state == "succeeded") == has_result for state, has_result in rows)


def test_a_newer_version_supersedes_older_work_and_only_its_result_is_latest(stack: ServiceStack) -> None:
    stack.start_worker("w1", JOBS_LEASE_SECONDS="30")
    client = stack.tenant("acme")
    v1 = client.submit("sleep", _sleep(60), resource_key="doc-1", resource_version=1).job.job_id
    _wait_state(client, v1, "RUNNING")
    with pytest.raises(grpc.RpcError) as not_ready:
        _latest(client, "doc-1")
    assert _reason(not_ready.value) == "RESULT_NOT_READY"

    v2 = client.submit("sleep", _sleep(0.5), resource_key="doc-1", resource_version=2).job.job_id
    assert _state(client, v1) == "SUPERSEDED"
    stale = client.submit("echo", b"old", resource_key="doc-1", resource_version=1)
    assert stale.created and stale.job.state == S.JOB_STATE_SUPERSEDED
    with pytest.raises(grpc.RpcError) as not_ready:
        _latest(client, "doc-1")
    assert _reason(not_ready.value) == "RESULT_NOT_READY"
    _wait_state(client, v2, "SUCCEEDED")
    latest = _latest(client, "doc-1")
    assert (latest.resource_version, latest.job.job_id, latest.result.job_id) == (2, v2, v2)
    with pytest.raises(grpc.RpcError) as missing:
        stack.tenant("globex").stub.GetLatestResult(
            jobs_pb2.GetLatestResultRequest(resource_key="doc-1"), metadata=stack.tenant("globex").metadata
        )
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_superseded_jobs_late_completion_is_refused(stack: ServiceStack) -> None:
    client = stack.tenant("acme")
    v1 = client.submit("echo", b"v1", resource_key="doc-9", resource_version=1).job.job_id
    from shared.storage.database import Database, PoolSettings

    db = await Database.open(PoolSettings(stack.database_url), wait=True)
    try:
        async with db.transaction() as conn:
            (claimed,) = await lease_store.claim_batch(
                conn, worker_id="manual", kinds=["echo"], limit=1, lease_seconds=30
            )
    finally:
        await db.close()
    client.submit("echo", b"v2", resource_key="doc-9", resource_version=2)
    worker, metadata = stack.worker_stub()
    heartbeat = worker.Heartbeat(
        worker_pb2.HeartbeatRequest(
            leases=[worker_pb2.Lease(job_id=v1, fencing_token=claimed.fencing_token)], extend_by={"seconds": 30}
        ),
        metadata=metadata,
    )
    assert (heartbeat.leases[0].held, heartbeat.leases[0].superseded) == (False, True)
    with pytest.raises(grpc.RpcError) as refused:
        worker.CompleteJob(
            worker_pb2.CompleteJobRequest(job_id=v1, fencing_token=claimed.fencing_token, result=b"late"),
            metadata=metadata,
        )
    assert (refused.value.code(), _reason(refused.value)) == (grpc.StatusCode.FAILED_PRECONDITION, "JOB_SUPERSEDED")
    with pytest.raises(grpc.RpcError):
        client.result(v1)


def test_dependencies_block_until_success_and_fail_when_one_fails(stack: ServiceStack) -> None:
    stack.start_worker("w1")
    client = stack.tenant("acme")
    first = client.submit("sleep", _sleep(1)).job.job_id
    doomed = client.submit("flaky", json.dumps({"fail_times": 1, "category": "permanent"}).encode()).job.job_id
    after_first = client.submit("echo", b"next", depends_on=[first])
    assert after_first.job.state == S.JOB_STATE_BLOCKED
    after_both = client.submit("echo", b"never", depends_on=[first, doomed]).job.job_id
    _wait_state(client, after_first.job.job_id, "SUCCEEDED")
    failed = _wait_state(client, after_both, "FAILED")
    assert doomed in failed.last_error.message
    late = client.submit("echo", b"too late", depends_on=[doomed]).job
    assert late.state == S.JOB_STATE_FAILED and doomed in late.last_error.message
    foreign = stack.tenant("globex")
    with pytest.raises(grpc.RpcError) as refused:
        foreign.submit("echo", depends_on=[first])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- Watch and history ------------------------------------------------------------------------------


def test_watch_streams_every_transition_resumes_and_ends_after_a_terminal_state(stack: ServiceStack) -> None:
    client = stack.tenant("acme")
    # A kind stays known after its last worker stopped: the submission waits, visibly PENDING.
    stack.start_worker("w0", **TEST_HANDLERS).stop()
    job_id = client.submit("quick.flaky", json.dumps({"fail_times": 1}).encode()).job.job_id
    stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=client.metadata, timeout=30)
    first = next(stream)
    assert (first.state, first.sequence) == (S.JOB_STATE_PENDING, 1)
    stack.start_worker("w1", **TEST_HANDLERS)
    rest = list(stream)
    states = [S.Name(m.state).removeprefix("JOB_STATE_") for m in [first, *rest]]
    assert states == ["PENDING", "RUNNING", "RETRY_WAIT", "RUNNING", "SUCCEEDED"]
    assert [m.sequence for m in [first, *rest]] == [1, 2, 3, 4, 5]
    resumed = list(
        client.stub.WatchJob(
            jobs_pb2.WatchJobRequest(job_id=job_id, after_sequence=3), metadata=client.metadata, timeout=10
        )
    )
    assert [m.sequence for m in resumed] == [4, 5]
    events = _events(client, job_id)
    assert [(S.Name(e.from_state), S.Name(e.to_state)) for e in events][:2] == [
        ("JOB_STATE_UNSPECIFIED", "JOB_STATE_PENDING"),
        ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"),
    ]
    assert events[1].actor == "worker:w1" and events[1].fencing_token == 1
    assert events[3].fencing_token == 2 and events[2].reason == "attempt failed"


def test_watch_survives_a_lost_listen_connection(stack: ServiceStack) -> None:
    client = stack.tenant("acme")
    job_id = client.submit("echo", b"x").job.job_id
    stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=client.metadata, timeout=30)
    assert next(stream).state == S.JOB_STATE_PENDING
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'jobs-listener' AND datname = current_database()"
        ).fetchone()[0]
    assert killed == 1
    stack.start_worker("w1")
    assert [m.state for m in stream][-1] == S.JOB_STATE_SUCCEEDED
