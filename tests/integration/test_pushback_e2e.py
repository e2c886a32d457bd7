"""Pushbacks and batch reports through the API and a worker (in this process)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from jobs.v1 import jobs_pb2, worker_pb2
from shared.rpc_error_details import rpc_error_details
from tests.handlers_for_tests import PUSHBACK_KEY
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = pytest.mark.timeout(180)

S = jobs_pb2.JobState
R = worker_pb2.ReportOutcome
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}


def _settled(client: TenantClient, job_id: str) -> jobs_pb2.Job:
    terminal = {S.JOB_STATE_SUCCEEDED, S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED, S.JOB_STATE_OUTCOME_UNKNOWN}
    wait_until(lambda: client.get(job_id).state in terminal, timeout=60, what=f"job {job_id} to settle")
    return client.get(job_id)


def _later(client: TenantClient) -> str:
    """A job no worker claims during the test: it waits an hour."""
    run_after = timestamp_pb2.Timestamp()
    run_after.FromDatetime(datetime.now(UTC) + timedelta(hours=1))
    return client.submit("echo", b"x", run_after=run_after).job.job_id


def test_a_job_pushed_back_twice_succeeds_on_its_only_attempt(service_stack: ServiceStack):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    job_id = client.submit("pushed.twice", b"done").job.job_id

    job = _settled(client, job_id)

    assert (job.state, job.attempts, job.max_attempts) == (S.JOB_STATE_SUCCEEDED, 1, 1)
    assert client.result(job_id).fencing_token == 3, "three claims, each under a higher token"
    events = client.stub.ListJobEvents(jobs_pb2.ListJobEventsRequest(job_id=job_id), metadata=client.metadata).events
    pushed = [e for e in events if e.reason.startswith("pushed back until ")]
    assert [(e.to_state, e.attempt) for e in pushed] == [(S.JOB_STATE_PENDING, 0)] * 2
    assert all(f"(key {PUSHBACK_KEY})" in e.reason and not e.HasField("error") for e in pushed)


def test_batch_reports_answer_stale_and_cancelled_as_values(service_stack: ServiceStack):
    service_stack.start_api()
    client = service_stack.tenant("acme")
    waiting, cancelled = _later(client), _later(client)
    client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=cancelled), metadata=client.metadata)
    stub, metadata = service_stack.worker_stub()
    error = jobs_pb2.JobError(category=jobs_pb2.ERROR_CATEGORY_RETRYABLE, message="boom")

    failed = stub.FailJobs(
        worker_pb2.FailJobsRequest(
            failures=[
                worker_pb2.FailJobRequest(job_id=waiting, fencing_token=1, error=error),
                worker_pb2.FailJobRequest(job_id=cancelled, fencing_token=1, error=error),
            ]
        ),
        metadata=metadata,
    )
    released = stub.ReleaseJobs(
        worker_pb2.ReleaseJobsRequest(
            releases=[
                worker_pb2.ReleaseJobRequest(job_id=cancelled, fencing_token=1, reason="shutdown"),
                worker_pb2.ReleaseJobRequest(job_id=waiting, fencing_token=1, reason="shutdown"),
            ]
        ),
        metadata=metadata,
    )

    assert [(o.job_id, o.outcome) for o in failed.outcomes] == [
        (waiting, R.REPORT_OUTCOME_LEASE_LOST),
        (cancelled, R.REPORT_OUTCOME_JOB_CANCELLED),
    ]
    assert [(o.job_id, o.outcome) for o in released.outcomes] == [
        (cancelled, R.REPORT_OUTCOME_JOB_CANCELLED),
        (waiting, R.REPORT_OUTCOME_LEASE_LOST),
    ]
    assert client.get(waiting).state == S.JOB_STATE_PENDING, "a refused report changes nothing"
    # Every other call that can be refused answers the same value.
    beat = stub.Heartbeat(
        worker_pb2.HeartbeatRequest(
            leases=[worker_pb2.Lease(job_id=j, fencing_token=1) for j in (waiting, cancelled)],
            extend_by=duration_pb2.Duration(seconds=30),
        ),
        metadata=metadata,
    )
    assert [(s.job_id, s.outcome) for s in beat.leases] == [
        (waiting, R.REPORT_OUTCOME_LEASE_LOST),
        (cancelled, R.REPORT_OUTCOME_JOB_CANCELLED),
    ]
    read = stub.GetDependencyResults(
        worker_pb2.GetDependencyResultsRequest(job_id=cancelled, fencing_token=1), metadata=metadata
    )
    assert (read.outcome, list(read.results)) == (R.REPORT_OUTCOME_JOB_CANCELLED, [])
    # The single calls keep the contract's error status for the same refusal.
    with pytest.raises(grpc.RpcError) as raised:
        stub.FailJob(worker_pb2.FailJobRequest(job_id=waiting, fencing_token=1, error=error), metadata=metadata)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = rpc_error_details(raised.value)
    assert details is not None and details.reason == "LEASE_LOST"
    with pytest.raises(grpc.RpcError) as raised:
        stub.ReleaseJob(worker_pb2.ReleaseJobRequest(job_id=cancelled, fencing_token=1), metadata=metadata)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
