"""Sequences, singletons and debounce through the API and a worker (in this process): the fields go in
and come back, a waiting job says why, and a halted sequence goes on once its failed job is cancelled."""

from __future__ import annotations

import json

import grpc
import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack

pytestmark = pytest.mark.timeout(180)

S = jobs_pb2.JobState


def test_a_halted_sequence_says_so_and_goes_on_once_its_failed_job_is_cancelled(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    client = service_stack.tenant("acme")
    failing = json.dumps({"fail_times": 5, "category": "permanent"}).encode()
    first = client.submit("flaky", failing, sequence_key="doc-7").job
    second = client.submit("echo", b"next", sequence_key="doc-7").job
    assert (first.sequence_key, second.sequence_key) == ("doc-7", "doc-7")

    client.wait_state(first.job_id, S.JOB_STATE_FAILED)
    waiting = client.get(second.job_id)
    assert waiting.state == S.JOB_STATE_PENDING
    assert (waiting.waiting_reason, waiting.waiting_for_key) == ("sequence_halted", "doc-7")

    client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=first.job_id, reason="skip"), metadata=client.metadata)
    assert client.wait_state(second.job_id, S.JOB_STATE_SUCCEEDED).waiting_reason == ""


def test_singleton_and_debounce_answers_name_their_job_and_bad_combinations_name_the_field(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    client = service_stack.tenant("acme")
    first = client.submit("echo", b"a", singleton_key="nightly")
    again = client.submit("echo", b"b", singleton_key="nightly")
    assert (again.job.job_id, again.created, again.job.singleton_key) == (first.job.job_id, False, "nightly")

    debounce = jobs_pb2.Debounce(key="doc", quiet_seconds=60, max_wait_seconds=120)
    burst = [client.submit("echo", f"edit {i}".encode(), debounce=debounce) for i in range(3)]
    assert {b.job.job_id for b in burst} == {burst[0].job.job_id}
    assert [b.created for b in burst] == [True, False, False]
    assert burst[0].job.debounce_key == "doc"

    with pytest.raises(grpc.RpcError) as refused:
        client.submit("echo", b"", singleton_key="k", idempotency_key="i")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "singleton_key" in (refused.value.details() or "")
