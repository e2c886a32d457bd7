"""The service pair end to end: real processes from their entry points, on loopback ports."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import grpc
import psycopg
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from jobs.v1 import jobs_pb2, worker_pb2
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SUCCEEDED = jobs_pb2.JOB_STATE_SUCCEEDED
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}


def _count(database_url: str, query: str, params=()) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute(query, params).fetchone()[0]


def _row(database_url: str, query: str, params=()) -> tuple:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return row


def test_echo_jobs_from_two_tenants_all_succeed_with_one_result_each(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1", JOBS_WORKER_CONCURRENCY="8")
    service_stack.start_worker("w2", JOBS_WORKER_CONCURRENCY="8")
    submitted: dict[str, tuple[str, bytes]] = {}
    for tenant in ("acme", "globex"):
        client = service_stack.tenant(tenant)
        for batch in range(5):
            payloads = [f"{tenant}-{batch}-{i}".encode() for i in range(45)]
            response = client.submit_many([jobs_pb2.SubmitJobRequest(kind="echo", payload=p) for p in payloads])
            for result, payload in zip(response.results, payloads, strict=True):
                assert result.created
                submitted[result.job.job_id] = (tenant, payload)
        for i in range(25):
            payload = f"{tenant}-single-{i}".encode()
            submitted[client.submit("echo", payload).job.job_id] = (tenant, payload)
    assert len(submitted) == 500

    wait_until(
        lambda: _count(service_stack.database_url, "SELECT count(*) FROM jobs WHERE state = 'succeeded'") == 500,
        timeout=90,
        interval=0.2,
        what="500 jobs to succeed",
    )
    for job_id, (tenant, payload) in submitted.items():
        client = service_stack.tenant(tenant)
        assert client.get(job_id).state == SUCCEEDED
        stored = client.result(job_id)
        assert (stored.payload, stored.attempt, stored.fencing_token) == (payload, 1, 1)
    assert _count(service_stack.database_url, "SELECT count(*) FROM job_results") == 500
    workers = _count(
        service_stack.database_url,
        "SELECT count(DISTINCT actor) FROM job_events WHERE reason = 'claimed'",
    )
    assert workers == 2, "both replicas should have claimed work"


def test_a_tenant_cannot_see_another_tenants_job(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    job_id = service_stack.tenant("acme").submit("echo", b"private").job.job_id
    other = service_stack.tenant("globex")
    missing = "00000000-0000-4000-8000-000000000000"
    answers = []
    for candidate in (job_id, missing):
        with pytest.raises(grpc.RpcError) as raised:
            other.get(candidate)
        answers.append((raised.value.code(), raised.value.details()))
    assert answers[0] == answers[1] == (grpc.StatusCode.NOT_FOUND, "job not found")
    with pytest.raises(grpc.RpcError) as raised:
        other.result(job_id)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    listed = other.stub.ListJobs(jobs_pb2.ListJobsRequest(), metadata=other.metadata)
    assert list(listed.jobs) == []


def test_sigkilled_worker_jobs_finish_on_the_other_replica(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    doomed = service_stack.start_worker("doomed", JOBS_WORKER_CONCURRENCY="4")
    client = service_stack.tenant("acme")
    payload = json.dumps({"seconds": 1.5}).encode()
    job_ids = [client.submit("sleep", payload).job.job_id for _ in range(4)]
    url = service_stack.database_url
    wait_until(
        lambda: _count(url, "SELECT count(*) FROM jobs WHERE state = 'running' AND lease_owner = 'doomed'") == 4,
        timeout=15,
        what="the doomed worker to hold all four jobs",
    )
    doomed.signal(signal.SIGKILL)
    doomed.popen.wait(5)
    service_stack.start_worker("survivor", JOBS_WORKER_CONCURRENCY="4")

    wait_until(lambda: all(client.get(j).state == SUCCEEDED for j in job_ids), timeout=30, what="all to succeed")
    for job_id in job_ids:
        result = client.result(job_id)
        assert (result.attempt, result.fencing_token) == (2, 2)
        assert result.payload == payload
    reasons = _count(url, "SELECT count(*) FROM job_events WHERE reason = 'lease expired'")
    assert reasons == 4


def test_paused_worker_cannot_overwrite_the_newer_attempts_result(service_stack: ServiceStack, tmp_path: Path) -> None:
    """The first worker freezes mid-attempt (its event loop blocked, as in a long pause): its lease runs
    out, another replica runs the job to success, and the late completion is refused."""
    api = service_stack.start_api(**TEST_HANDLERS)
    paused = service_stack.start_worker("paused", JOBS_WORKER_CONCURRENCY="1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    release = tmp_path / "release-the-paused-worker"
    job_id = client.submit("stall.first", str(release).encode()).job.job_id
    url = service_stack.database_url
    wait_until(
        lambda: _count(url, "SELECT count(*) FROM jobs WHERE state = 'running' AND lease_owner = 'paused'") == 1,
        timeout=15,
        what="the first worker to claim the job",
    )
    service_stack.start_worker("other", JOBS_WORKER_CONCURRENCY="1", **TEST_HANDLERS)
    wait_until(lambda: client.get(job_id).state == SUCCEEDED, timeout=30, what="the other replica to finish")
    stored = _row(
        url, "SELECT payload, attempt, fencing_token, created_at FROM job_results WHERE job_id = %s", (job_id,)
    )
    assert stored[1:3] == (2, 2)
    refusals_before = api.metric_value("jobs_fenced_rejections_total", {"reason": "LEASE_LOST"})

    release.touch()
    wait_until(
        lambda: "report refused: lease_lost" in paused.log_text(),
        timeout=15,
        what="the resumed worker's completion to be refused",
    )
    assert api.metric_value("jobs_fenced_rejections_total", {"reason": "LEASE_LOST"}) > refusals_before
    assert (
        _row(url, "SELECT payload, attempt, fencing_token, created_at FROM job_results WHERE job_id = %s", (job_id,))
        == stored
    )
    assert _count(url, "SELECT count(*) FROM job_results") == 1
    job = client.get(job_id)
    assert (job.state, job.attempts, job.fencing_token) == (SUCCEEDED, 2, 2)


def test_worker_sigterm_drains_then_releases_and_exits_zero(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    worker = service_stack.start_worker("draining", JOBS_SHUTDOWN_GRACE_SECONDS="1", JOBS_LEASE_SECONDS="30")
    client = service_stack.tenant("acme")
    quick = client.submit("sleep", json.dumps({"seconds": 0.2}).encode()).job.job_id
    slow = client.submit("sleep", json.dumps({"seconds": 60}).encode()).job.job_id
    url = service_stack.database_url
    wait_until(
        lambda: _count(url, "SELECT count(*) FROM jobs WHERE state IN ('running', 'succeeded')") == 2,
        timeout=15,
        what="both jobs to start",
    )
    worker.signal(signal.SIGTERM)
    assert worker.popen.wait(15) == 0
    assert client.get(quick).state == SUCCEEDED
    released = client.get(slow)
    assert released.state == jobs_pb2.JOB_STATE_PENDING
    assert _count(url, "SELECT count(*) FROM job_events WHERE reason LIKE 'released:%%'") == 1


def test_api_health_reflection_and_graceful_shutdown(service_stack: ServiceStack) -> None:
    api = service_stack.start_api()
    assert service_stack.health() == "SERVING"
    assert service_stack.health("liveness") == "SERVING"
    assert service_stack.health("jobs.v1.JobService") == "SERVING"
    stub = reflection_pb2_grpc.ServerReflectionStub(service_stack.channel())
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    responses = stub.ServerReflectionInfo(iter([request]))  # type: ignore[operator]  # the stubs leave it untyped
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"jobs.v1.JobService", "jobs.v1.WorkerService", "grpc.health.v1.Health"} <= names
    api.signal(signal.SIGTERM)
    assert api.popen.wait(15) == 0


def test_health_is_not_serving_while_the_database_is_unreachable(service_stack: ServiceStack) -> None:
    from tests.process_fixtures import free_port

    service_stack.database_url = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere?connect_timeout=1"
    service_stack._spawn(
        "api",
        "api_service",
        {
            "JOBS_API_LISTEN": service_stack.api_target,
            "JOBS_TOKENS_FILE": str(service_stack.tokens_file),
            "JOBS_HEALTH_INTERVAL_SECONDS": "0.2",
            "JOBS_DB_ACQUIRE_TIMEOUT_SECONDS": "0.5",
        },
    )
    wait_until(lambda: service_stack.health() == "NOT_SERVING", timeout=20, what="NOT_SERVING")
    with pytest.raises(grpc.RpcError) as raised:
        service_stack.tenant("acme").submit("echo", b"x")
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert service_stack.health("liveness") == "SERVING"


def test_readiness_waits_until_the_built_in_kinds_are_published(service_stack: ServiceStack) -> None:
    """A replica that answers SERVING must accept `echo`: its built-in kinds are published first."""
    with psycopg.connect(service_stack.database_url) as holder:
        holder.execute("LOCK TABLE job_kinds IN EXCLUSIVE MODE")  # reads go on; the publication waits
        api = service_stack._spawn(
            "api",
            "api_service",
            {
                "JOBS_API_LISTEN": service_stack.api_target,
                "JOBS_TOKENS_FILE": str(service_stack.tokens_file),
                "JOBS_HEALTH_INTERVAL_SECONDS": "0.2",
            },
        )
        probes = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobs-api-probe' AND state = 'idle'"
            " AND datname = current_database()"
        )
        with psycopg.connect(service_stack.database_url, autocommit=True) as observer:
            wait_until(
                lambda: observer.execute(probes).fetchone()[0] == 1, timeout=60, what="the health probe to answer"
            )
        assert service_stack.health() == "NOT_SERVING"
        holder.rollback()
    wait_until(lambda: service_stack.health() == "SERVING", timeout=60, what="SERVING once the kinds are published")
    assert service_stack.tenant("acme").submit("echo", b"x").created
    assert api.popen.poll() is None


def test_credentials_are_checked_per_service(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    acme = service_stack.tenant("acme")
    request = jobs_pb2.SubmitJobRequest(kind="echo")
    cases = [
        ((), grpc.StatusCode.UNAUTHENTICATED),
        ((("authorization", "Bearer not-a-token"),), grpc.StatusCode.UNAUTHENTICATED),
        ((("authorization", "Basic abc"),), grpc.StatusCode.UNAUTHENTICATED),
        (service_stack.worker_stub()[1], grpc.StatusCode.PERMISSION_DENIED),
    ]
    for metadata, code in cases:
        with pytest.raises(grpc.RpcError) as raised:
            acme.stub.SubmitJob(request, metadata=metadata, timeout=5)
        assert raised.value.code() == code
    worker_stub, _ = service_stack.worker_stub()
    with pytest.raises(grpc.RpcError) as raised:
        worker_stub.Heartbeat(worker_pb2.HeartbeatRequest(), metadata=acme.metadata, timeout=5)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _count(service_stack.database_url, "SELECT count(*) FROM jobs") == 0
