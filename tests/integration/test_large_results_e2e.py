"""Results that together pass gRPC's 4 MiB message, through the API and the worker (in this process): completions
finishing together are sent in calls split by size, a single result over the maximum fails its attempt
PERMANENT naming the limit (and is never run again), and a delivery set whose results add up past 4 MiB
is read a page at a time."""

from __future__ import annotations

import json

import grpc
import pytest

from jobs.v1 import jobs_pb2
from shared.rpc_error_details import rpc_error_details
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SUCCEEDED, FAILED = jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED
RESULT_BYTES = 1_000_000
TOGETHER = 8


def _ended(client: TenantClient, job_ids: list[str]) -> list[jobs_pb2.Job] | None:
    jobs = [client.get(job_id) for job_id in job_ids]
    return jobs if all(j.state in (SUCCEEDED, FAILED) for j in jobs) else None


def test_results_finishing_together_past_4_mib_are_stored_once_each(service_stack: ServiceStack) -> None:
    """Eight results of a million bytes finish within one flush window on one worker: one CompleteJobs
    call of 8 MB was refused, and all eight ran again."""
    service_stack.start_api()
    acme = service_stack.tenant("acme")
    payloads = [bytes([i]) * RESULT_BYTES for i in range(TOGETHER)]
    ids = [acme.submit("echo", payload).job.job_id for payload in payloads]
    # Started once all are waiting: one claim takes the eight, and their results meet in one flush window.
    service_stack.start_worker("w1", JOBS_WORKER_CONCURRENCY=str(TOGETHER), JOBS_COMPLETION_FLUSH_SECONDS="1.0")

    jobs = wait_until(lambda: _ended(acme, ids), timeout=120, what="the eight jobs to end")

    assert [(j.state, j.attempts) for j in jobs] == [(SUCCEEDED, 1)] * TOGETHER
    assert [acme.result(job_id).payload for job_id in ids] == payloads


def test_a_result_over_the_maximum_fails_its_attempt_for_good_naming_the_limit(service_stack: ServiceStack) -> None:
    limit = {"JOBS_MAX_RESULT_BYTES": "5000"}
    service_stack.start_api(**limit)
    service_stack.start_worker("w1", **limit)
    acme = service_stack.tenant("acme")
    job_id = acme.submit("echo", b"x" * 6000, max_attempts=3).job.job_id
    fits = acme.submit("echo", b"y" * 5000).job.job_id

    jobs = wait_until(lambda: _ended(acme, [job_id, fits]), timeout=60, what="both jobs to end")

    assert (jobs[0].state, jobs[0].attempts) == (FAILED, 1), "never run again: it would return as much again"
    assert jobs[0].last_error.category == jobs_pb2.ERROR_CATEGORY_PERMANENT
    assert (
        "6000 bytes" in jobs[0].last_error.message
        and "5000 bytes (JOBS_MAX_RESULT_BYTES)" in jobs[0].last_error.message
    )
    assert jobs[1].state == SUCCEEDED


def test_the_api_refuses_a_result_over_its_maximum_when_a_worker_allows_more(service_stack: ServiceStack) -> None:
    service_stack.start_api(JOBS_MAX_RESULT_BYTES="5000")
    service_stack.start_worker("w1", JOBS_MAX_RESULT_BYTES="10000")
    acme = service_stack.tenant("acme")
    job_id = acme.submit("echo", b"x" * 6000, max_attempts=3).job.job_id

    (job,) = wait_until(lambda: _ended(acme, [job_id]), timeout=60, what="the job to end")

    assert (job.state, job.attempts, job.last_error.category) == (FAILED, 1, jobs_pb2.ERROR_CATEGORY_PERMANENT)
    assert "JOBS_MAX_RESULT_BYTES" in job.last_error.message


def _pages(call, request) -> list[jobs_pb2.DeliverySet]:
    pages = [call(request)]
    while pages[-1].next_page_token:
        request.page_token = pages[-1].next_page_token
        pages.append(call(request))
    return pages


def test_a_delivery_set_whose_results_pass_4_mib_is_read_a_page_at_a_time(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1", JOBS_WORKER_CONCURRENCY="6", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme = service_stack.tenant("acme")
    names = [f"part-{i}" for i in range(6)]
    members = [
        jobs_pb2.DeliverySetMember(
            name=name,
            job=jobs_pb2.SubmitJobRequest(
                kind="sized.result", payload=json.dumps({"bytes": RESULT_BYTES, "fill": i}).encode()
            ),
        )
        for i, name in enumerate(names)
    ]
    request = jobs_pb2.SubmitDeliverySetRequest(
        resource_key="lesson", resource_version=1, members=members, fan_in=jobs_pb2.SubmitJobRequest(kind="echo")
    )
    submitted = acme.stub.SubmitDeliverySet(request, metadata=acme.metadata, timeout=30).set
    ids = [m.job.job_id for m in submitted.members] + [submitted.fan_in.job_id]
    wait_until(lambda: _ended(acme, ids), timeout=120, what="the set's jobs to end")

    def get(req: jobs_pb2.GetDeliverySetRequest) -> jobs_pb2.DeliverySet:
        return acme.stub.GetDeliverySet(req, metadata=acme.metadata, timeout=30)

    def latest(req: jobs_pb2.GetLatestDeliverySetRequest) -> jobs_pb2.DeliverySet:
        return acme.stub.GetLatestDeliverySet(req, metadata=acme.metadata, timeout=30)

    for pages in (
        _pages(get, jobs_pb2.GetDeliverySetRequest(resource_key="lesson")),
        _pages(latest, jobs_pb2.GetLatestDeliverySetRequest(resource_key="lesson")),
    ):
        assert len(pages) > 1 and all(p.state == jobs_pb2.DELIVERY_SET_STATE_COMPLETE for p in pages)
        members_read = [m for p in pages for m in p.members]
        assert [m.name for m in members_read] == names
        assert [m.result.payload for m in members_read] == [bytes([i]) * RESULT_BYTES for i in range(6)]
        assert pages[-1].HasField("fan_in") and pages[-1].fan_in_result.payload == b""

    first = get(jobs_pb2.GetDeliverySetRequest(resource_key="lesson"))
    acme.stub.DeleteResource(
        jobs_pb2.DeleteResourceRequest(resource_key="lesson", reason="withdrawn"), metadata=acme.metadata, timeout=30
    )
    with pytest.raises(grpc.RpcError) as changed:
        get(jobs_pb2.GetDeliverySetRequest(resource_key="lesson", page_token=first.next_page_token))
    assert changed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = rpc_error_details(changed.value)
    assert details is not None and details.reason == "DELIVERY_SET_CHANGED"
