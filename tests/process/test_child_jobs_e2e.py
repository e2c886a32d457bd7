"""Child jobs through the real processes: a handler of each shape (a coroutine, a thread, a child
process) spawns pages and a fan-in; the API creates them with the parent's completion, the workers run
them, and the fan-in runs last and reads every page's result. A replica frozen past its lease, whose job
another replica took over, leaves no child of its own (tests/integration/test_child_jobs.py sends such
late completions to the API and races replicas' completions over PostgreSQL)."""

from __future__ import annotations

import json
import signal

import psycopg
import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

S = jobs_pb2.JobState
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}
PAGES = 4


def _settled(client: TenantClient, job_id: str) -> jobs_pb2.Job:
    terminal = {S.JOB_STATE_SUCCEEDED, S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED, S.JOB_STATE_OUTCOME_UNKNOWN}
    wait_until(lambda: client.get(job_id).state in terminal, timeout=90, what=f"job {job_id} to settle")
    return client.get(job_id)


def _children(client: TenantClient, parent: str) -> list[jobs_pb2.Job]:
    jobs: list[jobs_pb2.Job] = []
    token = ""
    while True:
        page = client.stub.ListJobs(
            jobs_pb2.ListJobsRequest(parent_job_id=parent, page_size=2, page_token=token),
            metadata=client.metadata,
            timeout=10,
        )
        jobs.extend(page.jobs)
        token = page.next_page_token
        if not token:
            return jobs


@pytest.mark.parametrize("executor", ["async", "thread", "process"])
def test_a_handler_fans_out_and_a_fan_in_gathers_the_results(service_stack: ServiceStack, executor: str) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    service_stack.start_worker("w2", **TEST_HANDLERS)
    client = service_stack.tenant("acme")

    parent = client.submit(f"fanout.{executor}", json.dumps({"pages": PAGES}).encode()).job
    assert _settled(client, parent.job_id).state == S.JOB_STATE_SUCCEEDED
    spawned = json.loads(client.result(parent.job_id).payload)

    merge = _settled(client, spawned["fan_in"])
    assert merge.state == S.JOB_STATE_SUCCEEDED and merge.parent_job_id == parent.job_id
    assert client.result(merge.job_id).payload == b"|".join(f"page {i}".encode() for i in range(PAGES))
    children = _children(client, parent.job_id)
    assert sorted(c.job_id for c in children) == sorted([*spawned["pages"], spawned["fan_in"]])
    pages = [c for c in children if c.kind == "plain.echo"]
    assert all(c.state == S.JOB_STATE_SUCCEEDED for c in pages)
    # The fan-in started only after the last page had ended.
    assert merge.started_at.ToDatetime() >= max(c.finished_at.ToDatetime() for c in pages)
    assert {c.labels["page"] for c in pages} == {str(i) for i in range(PAGES)}

    # Another tenant learns nothing of them.
    other = service_stack.tenant("globex")
    assert _children(other, parent.job_id) == []


def _owner(stack: ServiceStack, job_id: str) -> str | None:
    with psycopg.connect(stack.database_url) as conn:
        row = conn.execute("SELECT lease_owner FROM jobs WHERE job_id = %s AND state = 'running'", (job_id,)).fetchone()
    return row[0] if row else None


def test_a_replica_whose_lease_was_taken_over_leaves_no_children(service_stack: ServiceStack) -> None:
    """The first replica spawns, then freezes past its lease; the second takes the job over, spawns its
    own and completes. Thawed, the first one learns its lease is gone (by its own clock, or from the
    API's refusal) and none of its children exists."""
    service_stack.start_api()
    frozen = service_stack.start_worker("frozen", JOBS_WORKER_CONCURRENCY="1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    job_id = client.submit("spawn.then_wait", json.dumps({"seconds": 3}).encode()).job.job_id
    wait_until(lambda: _owner(service_stack, job_id) == "frozen", timeout=30, what="the first replica to run it")

    frozen.signal(signal.SIGSTOP)
    try:
        service_stack.start_worker("takeover", **TEST_HANDLERS)
        wait_until(lambda: _owner(service_stack, job_id) == "takeover", timeout=60, what="the takeover")
    finally:
        frozen.signal(signal.SIGCONT)
    done = _settled(client, job_id)
    assert done.state == S.JOB_STATE_SUCCEEDED and done.fencing_token >= 2
    # Whichever comes first once thawed: its own clock, the refusal of its overdue heartbeat, or the
    # refusal of its report.
    learned = ("stopped: lease expired", "stopped: lease_lost", "report refused")
    wait_until(
        lambda: any(line in frozen.log_text() for line in learned),
        timeout=30,
        what="the thawed replica to learn its lease is gone",
    )

    children = _children(client, job_id)
    assert len(children) == 2
    assert {c.labels["token"] for c in children} == {str(done.fencing_token)}
