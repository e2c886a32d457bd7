"""Reads that never recompute, on the API and a worker (in this process): concurrent result reads of one job
cost one database read, tenants stay walled, and identical submissions asking for de-duplication run once.

Database reads are counted at the loader boundary, by the API's own jobs_result_cache_loads_total."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import psycopg
import pytest

from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from tests.process_fixtures import ServiceProcess, ServiceStack, TenantClient, tenant_token, wait_until

pytestmark = pytest.mark.timeout(120)

S = jobs_pb2.JobState
LOADS = "jobs_result_cache_loads_total"
LOOKUPS = "jobs_result_cache_lookups_total"
CONCURRENT_SUBMITS = 20


def _succeeded(client: TenantClient, payload: bytes, **fields) -> str:
    job_id = client.submit("echo", payload, **fields).job.job_id
    wait_until(lambda: client.get(job_id).state == S.JOB_STATE_SUCCEEDED, timeout=30, what=f"{job_id} to succeed")
    return job_id


async def _concurrent_reads(stack: ServiceStack, tenant: str, requests: list) -> list:
    """Every request in flight at once on one channel; answers (or errors) in request order."""
    metadata = (("authorization", f"Bearer {tenant_token(tenant)}"),)
    async with grpc.aio.insecure_channel(stack.api_target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        calls = [
            (stub.GetJobResult if isinstance(r, jobs_pb2.GetJobResultRequest) else stub.GetLatestResult)(
                r, metadata=metadata, timeout=30
            )
            for r in requests
        ]
        return await asyncio.gather(*calls, return_exceptions=True)


def _loads(api: ServiceProcess, read: str) -> float:
    return api.metric_value(LOADS, {"read": read})


@pytest.mark.parametrize("callers", [50, 1000])
async def test_concurrent_result_reads_of_one_job_make_one_database_read(
    service_stack: ServiceStack, callers: int, capsys: pytest.CaptureFixture
) -> None:
    api = service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    job_id = _succeeded(client, b"a summary that took twenty seconds")
    assert _loads(api, "job_result") == 0

    answers = await _concurrent_reads(
        service_stack, "acme", [jobs_pb2.GetJobResultRequest(job_id=job_id) for _ in range(callers)]
    )

    assert [a.payload for a in answers] == [b"a summary that took twenty seconds"] * callers
    assert _loads(api, "job_result") == 1
    outcomes = {
        o: api.metric_value(LOOKUPS, {"read": "job_result", "outcome": o}) for o in ("miss", "coalesced", "hit")
    }
    assert sum(outcomes.values()) == callers and outcomes["miss"] == 1
    with capsys.disabled():
        print(f"\n{callers} concurrent GetJobResult of one job: 1 database read; lookups {outcomes}")


def test_another_tenant_asking_for_a_cached_result_gets_not_found(service_stack: ServiceStack) -> None:
    api = service_stack.start_api()
    service_stack.start_worker("w1")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    job_id = _succeeded(acme, b"acme's secret")
    assert acme.result(job_id).payload == b"acme's secret"
    assert acme.result(job_id).payload == b"acme's secret"  # now from the cache

    with pytest.raises(grpc.RpcError) as refused:
        globex.result(job_id)

    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert "secret" not in (refused.value.details() or "")
    assert api.metric_value(LOOKUPS, {"read": "job_result", "outcome": "hit"}) == 1


async def test_concurrent_latest_result_reads_share_one_result_read_and_follow_the_head(
    service_stack: ServiceStack, capsys: pytest.CaptureFixture
) -> None:
    api = service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    _succeeded(client, b"version one", resource_key="doc-7", resource_version=1)
    request = jobs_pb2.GetLatestResultRequest(resource_key="doc-7")

    first = await _concurrent_reads(service_stack, "acme", [request] * 50)
    v2 = _succeeded(client, b"version two", resource_key="doc-7", resource_version=2)
    second = await _concurrent_reads(service_stack, "acme", [request] * 50)

    assert {(a.resource_version, a.result.payload) for a in first} == {(1, b"version one")}
    assert {(a.resource_version, a.job.job_id, a.result.payload) for a in second} == {(2, v2, b"version two")}
    assert _loads(api, "latest_result") == 2  # one per version
    head_reads = _loads(api, "resource_head")
    assert head_reads <= 100
    with capsys.disabled():
        print(f"\n2 x 50 concurrent GetLatestResult: 2 result reads, {head_reads:.0f} head reads")


def test_identical_submissions_with_dedupe_run_once_and_share_the_job(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    barrier = threading.Barrier(CONCURRENT_SUBMITS)

    def submit(_: int) -> tuple[str, bool]:
        barrier.wait()
        response = client.submit("summarize", b"The same long document. " * 200, dedupe_by_input=True)
        return response.job.job_id, response.created

    with ThreadPoolExecutor(CONCURRENT_SUBMITS) as pool:
        answers = list(pool.map(submit, range(CONCURRENT_SUBMITS)))

    job_ids = {job_id for job_id, _ in answers}
    assert len(job_ids) == 1 and sum(created for _, created in answers) == 1
    (job_id,) = job_ids
    wait_until(lambda: client.get(job_id).state == S.JOB_STATE_SUCCEEDED, timeout=30, what="the one job")
    with psycopg.connect(service_stack.database_url) as conn:
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        runs = conn.execute("SELECT count(*) FROM job_events WHERE to_state = 'running'").fetchone()[0]
    assert (jobs, runs, client.get(job_id).attempts) == (1, 1, 1)
    late = client.submit("summarize", b"The same long document. " * 200, dedupe_by_input=True)
    assert (late.job.job_id, late.created, late.job.state) == (job_id, False, S.JOB_STATE_SUCCEEDED)
    other_tenant = service_stack.tenant("globex").submit(
        "summarize", b"The same long document. " * 200, dedupe_by_input=True
    )
    assert other_tenant.created and other_tenant.job.job_id != job_id
