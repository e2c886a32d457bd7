"""Limits through the API and a worker (in this process): a tenant's own key bounds its jobs, the job that
waits stays PENDING and GetJob says why, and a bad key is refused naming the field."""

from __future__ import annotations

import json

import grpc
import psycopg
import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack

pytestmark = pytest.mark.timeout(180)

S = jobs_pb2.JobState


def _sleep(seconds: float) -> bytes:
    return json.dumps({"seconds": seconds}).encode()


def test_a_tenants_own_key_runs_one_job_of_a_document_at_a_time_and_the_other_waits_visibly(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    first = client.submit("sleep", _sleep(60), limit_keys=["doc:42@1"]).job.job_id
    client.wait_state(first, S.JOB_STATE_RUNNING)
    second = client.submit("sleep", _sleep(0), limit_keys=["doc:42@1"]).job.job_id
    other_doc = client.submit("sleep", _sleep(0), limit_keys=["doc:7@1"]).job.job_id

    client.wait_state(other_doc, S.JOB_STATE_SUCCEEDED)
    waiting = client.get(second)
    assert waiting.state == S.JOB_STATE_PENDING
    assert (waiting.waiting_reason, waiting.waiting_for_key) == ("limit_running", "tenant:acme/doc:42")

    client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=first), metadata=client.metadata)
    done = client.wait_state(second, S.JOB_STATE_SUCCEEDED)
    assert done.waiting_reason == ""


def test_a_paused_kind_waits_as_pending_and_says_so(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    with psycopg.connect(service_stack.database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO kind_pauses (kind, paused_by) VALUES ('sleep', 'test')")
    paused = client.submit("sleep", _sleep(0)).job.job_id
    client.wait_state(client.submit("echo", b"x").job.job_id, S.JOB_STATE_SUCCEEDED)

    job = client.get(paused)
    assert job.state == S.JOB_STATE_PENDING
    assert (job.waiting_reason, job.waiting_for_key) == ("kind_paused", "kind:sleep")


def test_a_bad_limit_key_is_refused_naming_the_field(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    client = service_stack.tenant("acme")
    with pytest.raises(grpc.RpcError) as refused:
        client.submit("echo", b"x", limit_keys=["fine", "has/slash", "doc@0"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert "limit_keys[1]" in details
    assert "limit_keys[2]" in details
    assert "limit_keys[0]" not in details
