"""Sequences, singletons and debounce through the SDK, run by two worker processes that race for the
same jobs: a sequence's jobs never overlap and run in the order submitted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from durable_jobs import Client, Debounce, JobState
from tests.process_fixtures import ServiceStack, tenant_token

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture
def client(service_stack: ServiceStack) -> Iterator[Client]:
    service_stack.start_api()
    for name in ("w1", "w2"):
        service_stack.start_worker(name, JOBS_WORKER_CONCURRENCY="8")
    with Client(service_stack.api_target, tenant_token("acme"), timeout=30) as jobs:
        yield jobs


def test_two_workers_run_each_sequence_one_job_at_a_time_in_order(client: Client) -> None:
    sequences = {
        key: [client.submit("sleep", {"seconds": 0.1, "n": i}, sequence_key=key).job_id for i in range(5)]
        for key in ("doc-a", "doc-b", "doc-c")
    }
    for ids in sequences.values():
        for job_id in ids:
            client.result(job_id, wait=True, timeout=120)
    for key, ids in sequences.items():
        jobs = [client.get(job_id) for job_id in ids]
        assert all(job.state is JobState.SUCCEEDED and job.sequence_key == key for job in jobs)
        assert all(job.attempts == 1 for job in jobs)
        for before, after in zip(jobs, jobs[1:], strict=False):
            assert before.finished_at is not None and after.started_at is not None
            assert before.finished_at <= after.started_at, f"{key}: a job started before the one before it ended"


def test_a_singleton_and_a_debounced_burst_each_answer_one_job(client: Client) -> None:
    first = client.submit("sleep", {"seconds": 2}, singleton_key="nightly")
    again = client.submit("sleep", {"seconds": 2}, singleton_key="nightly")
    assert (again.job_id, first.idempotency_key, first.singleton_key) == (first.job_id, "", "nightly")

    debounce = Debounce("doc-7", quiet_seconds=0.5, max_wait_seconds=5)
    burst = [client.submit("echo", f"edit {i}", debounce=debounce) for i in range(4)]
    assert {job.job_id for job in burst} == {burst[0].job_id}
    assert client.result(burst[0].job_id, wait=True, timeout=60) == b"edit 3"
