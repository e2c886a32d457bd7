"""Limits and backpressure through the real API: per-tenant rate and queue caps, concurrent calls and
Watch streams, message sizes, the caller's deadline as the statement timeout, an exhausted pool, and a
foreign session holding row locks. Each refusal is fast, says when to retry, and everything recovers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import psycopg
import pytest

from jobs.v1 import jobs_pb2
from shared.rpc_error_details import rpc_error_details
from tests.process_fixtures import ServiceStack, TenantClient, free_port, wait_until

pytestmark = pytest.mark.timeout(120)

SUCCEEDED = jobs_pb2.JOB_STATE_SUCCEEDED
PENDING = jobs_pb2.JOB_STATE_PENDING
# Far more than the burst: the bucket cannot refill that fast however slow each call is.
MAX_SUBMISSIONS_BEFORE_REFUSAL = 20


def _refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


def _retry_delay_seconds(error: grpc.RpcError) -> float:
    details = rpc_error_details(error)
    assert details is not None and details.retry_after_seconds is not None, error.details()
    return details.retry_after_seconds


def _api_backends(database_url: str, *, waiting_on_a_lock: bool = False) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'jobs-api' AND (NOT %s OR wait_event_type = 'Lock')",
            (waiting_on_a_lock,),
        ).fetchone()[0]


@pytest.fixture
def row_locker(service_stack: ServiceStack) -> Iterator[psycopg.Connection]:
    """A foreign session in an open transaction, free to lock rows until the test ends."""
    with psycopg.connect(service_stack.database_url) as conn:
        yield conn
        conn.rollback()


def test_submission_rate_per_tenant(service_stack: ServiceStack) -> None:
    # A slow refill, and submitting until refused: on a busy machine the burst's calls may take longer
    # than one token's refill, which must not decide whether the refusal is seen.
    service_stack.start_api(JOBS_TENANT_SUBMIT_RATE="0.5", JOBS_TENANT_SUBMIT_BURST="3")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    accepted, refused = 0, None
    while refused is None and accepted < MAX_SUBMISSIONS_BEFORE_REFUSAL:
        try:
            acme.submit("echo")
            accepted += 1
        except grpc.RpcError as error:
            refused = error
    assert refused is not None and accepted >= 3, f"accepted {accepted} without a refusal"
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    delay = _retry_delay_seconds(refused)
    assert 0 < delay <= 2.0
    assert globex.submit("echo").created  # one tenant's rate is not another's
    time.sleep(delay)  # the answer said when; waiting that long is the contract under test
    assert acme.submit("echo").created
    batch = _refusal(lambda: acme.submit_many([jobs_pb2.SubmitJobRequest(kind="echo")] * 3))
    assert batch.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_waiting_jobs_per_tenant(service_stack: ServiceStack) -> None:
    service_stack.start_api(JOBS_TENANT_MAX_QUEUED_JOBS="3")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    acme.submit_many([jobs_pb2.SubmitJobRequest(kind="echo")] * 2)
    acme.submit("echo")
    refused = _refusal(lambda: acme.submit("echo"))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _retry_delay_seconds(refused) > 0
    assert globex.submit("echo").created

    service_stack.start_worker("w1")
    wait_until(lambda: _submitted(acme), timeout=30, what="room in acme's queue once its jobs ran")


def _submitted(client: TenantClient) -> bool:
    try:
        return client.submit("echo").created
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        return False


def _open_watch(client: TenantClient, job_id: str):
    stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=client.metadata, timeout=60)
    assert next(stream).state == PENDING
    return stream


def test_watch_streams_are_capped(service_stack: ServiceStack) -> None:
    service_stack.start_api(JOBS_MAX_WATCH_STREAMS="2")
    acme = service_stack.tenant("acme")
    job_id = acme.submit("echo").job.job_id
    streams = [_open_watch(acme, job_id) for _ in range(2)]

    refused = _refusal(lambda: _open_watch(acme, job_id))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _retry_delay_seconds(refused) > 0
    assert acme.get(job_id).state == PENDING  # other calls go on

    streams.pop().cancel()
    wait_until(
        lambda: _status(lambda: _open_watch(acme, job_id)) == grpc.StatusCode.OK, timeout=10, what="a freed stream slot"
    )
    for stream in streams:
        stream.cancel()


def test_one_tenants_watch_streams_leave_other_tenants_room(service_stack: ServiceStack) -> None:
    """Streams are bounded per tenant, not only per process: one tenant opening as many as it can once
    made every other tenant's WatchJob fail RESOURCE_EXHAUSTED."""
    service_stack.start_api(JOBS_MAX_WATCH_STREAMS="6", JOBS_MAX_WATCH_STREAMS_PER_TENANT="3")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    acme_job, globex_job = acme.submit("echo").job.job_id, globex.submit("echo").job.job_id
    hog: list = []
    while len(hog) < 6 and _status(lambda: hog.append(_open_watch(acme, acme_job))) == grpc.StatusCode.OK:
        pass
    assert len(hog) == 3

    refused = _refusal(lambda: _open_watch(acme, acme_job))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and _retry_delay_seconds(refused) > 0
    others = [_open_watch(globex, globex_job) for _ in range(3)]

    for stream in hog + others:
        stream.cancel()


def test_concurrent_calls_are_capped_but_probes_are_not(service_stack: ServiceStack) -> None:
    service_stack.health_port = free_port()
    service_stack.start_api(JOBS_MAX_CONCURRENT_RPCS="2", JOBS_HEALTH_LISTEN=f"127.0.0.1:{service_stack.health_port}")
    acme = service_stack.tenant("acme")
    job_id = acme.submit("echo").job.job_id
    streams = [_open_watch(acme, job_id) for _ in range(2)]

    assert _refusal(lambda: acme.get(job_id)).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert service_stack.health() == "SERVING"  # the probe port has its own budget

    for stream in streams:
        stream.cancel()
    wait_until(lambda: _status(lambda: acme.get(job_id)) == grpc.StatusCode.OK, timeout=10, what="recovery")


def _status(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_message_and_payload_sizes(service_stack: ServiceStack) -> None:
    service_stack.start_api(JOBS_MAX_PAYLOAD_BYTES="4096")
    acme = service_stack.tenant("acme")
    assert _refusal(lambda: acme.submit("echo", b"x" * 4097)).code() == grpc.StatusCode.INVALID_ARGUMENT
    too_big = _refusal(lambda: acme.submit("echo", b"x" * (5 << 20)))
    assert too_big.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert acme.submit("echo", b"x" * 4096).created


def test_the_callers_deadline_becomes_the_statement_timeout(
    service_stack: ServiceStack, row_locker: psycopg.Connection
) -> None:
    service_stack.start_api(JOBS_DB_POOL_MAX="2", JOBS_DB_ACQUIRE_TIMEOUT_SECONDS="0.5")
    acme = service_stack.tenant("acme")
    job_id = acme.submit("echo").job.job_id
    row_locker.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (job_id,))

    # More abandoned calls than the pool has connections: each frees its connection when its
    # caller's deadline passes, instead of waiting on the lock for ever.
    for _ in range(4):
        refused = _refusal(
            lambda: acme.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=acme.metadata, timeout=1)
        )
        assert refused.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(
        lambda: _api_backends(service_stack.database_url, waiting_on_a_lock=True) == 0,
        timeout=5,
        what="the API's statements to be cancelled",
    )
    assert acme.get(job_id).state == PENDING
    row_locker.rollback()
    cancelled = acme.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=acme.metadata, timeout=10)
    assert cancelled.state == jobs_pb2.JOB_STATE_CANCELLED


def test_an_exhausted_pool_fails_fast_and_recovers(service_stack: ServiceStack, row_locker: psycopg.Connection) -> None:
    service_stack.start_api(JOBS_DB_POOL_MAX="2", JOBS_DB_ACQUIRE_TIMEOUT_SECONDS="0.5")
    acme = service_stack.tenant("acme")
    job_ids = [acme.submit("echo").job.job_id for _ in range(2)]
    row_locker.execute("SELECT 1 FROM jobs WHERE job_id = ANY (%s::uuid[]) FOR UPDATE", (job_ids,))
    stuck = [
        acme.stub.CancelJob.future(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=acme.metadata, timeout=30)
        for job_id in job_ids
    ]
    wait_until(
        lambda: _api_backends(service_stack.database_url, waiting_on_a_lock=True) == 2,
        timeout=10,
        what="both pooled connections to wait on the locks",
    )

    started = time.monotonic()
    refused = _refusal(lambda: acme.get(job_ids[0]))
    assert refused.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert time.monotonic() - started < 3

    row_locker.rollback()
    assert [future.result(timeout=10).state for future in stuck] == [jobs_pb2.JOB_STATE_CANCELLED] * 2
    assert acme.get(job_ids[0]).state == jobs_pb2.JOB_STATE_CANCELLED


def test_claimers_skip_rows_a_foreign_session_holds(
    service_stack: ServiceStack, row_locker: psycopg.Connection
) -> None:
    service_stack.start_api()
    acme = service_stack.tenant("acme")
    locked = acme.submit("echo", b"locked").job.job_id
    row_locker.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (locked,))
    service_stack.start_worker("w1")
    free = [acme.submit("echo", b"free").job.job_id for _ in range(5)]
    wait_until(lambda: all(acme.get(j).state == SUCCEEDED for j in free), timeout=30, what="the unlocked jobs")
    assert acme.get(locked).state == PENDING

    row_locker.rollback()
    wait_until(lambda: acme.get(locked).state == SUCCEEDED, timeout=30, what="the released job")
