"""Transactional enqueue: the outbox in a user's own database, and real relay processes that forward it
to a real API, crashed between a submission and its mark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import grpc
import psycopg
import pytest
from psycopg.rows import dict_row

import jobs_outbox
from jobs.v1 import jobs_pb2
from tests.process_fixtures import REPO_ROOT, ServiceStack, TenantClient, tenant_token, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
WAIT_SECONDS = 60.0


@pytest.fixture
def outbox_url(empty_database_url: str) -> str:
    """The user's own database, with the outbox table create_table() makes."""
    with psycopg.connect(empty_database_url) as conn:
        jobs_outbox.create_table(conn)
        jobs_outbox.create_table(conn)  # idempotent: a deploy may run it every time
    return empty_database_url


def _relay(stack: ServiceStack, outbox_url: str, name: str, *args: str, **env: str) -> subprocess.Popen:
    with (stack.workdir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs_outbox.relay", "--poll-seconds", "0.1", *args],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "JOBS_OUTBOX_DATABASE_URL": outbox_url,
                "JOBS_API_TARGET": stack.api_target,
                "JOBS_OUTBOX_TOKEN": tenant_token("acme"),
                **env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _outbox(outbox_url: str) -> list[dict]:
    with psycopg.connect(outbox_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM jobs_outbox ORDER BY outbox_id").fetchall()


def _jobs_labelled(client: TenantClient, value: str) -> list[jobs_pb2.Job]:
    request = jobs_pb2.ListJobsRequest(labels={"batch": value}, page_size=500)
    return list(client.stub.ListJobs(request, metadata=client.metadata, timeout=10).jobs)


def test_a_submission_exists_exactly_when_the_callers_transaction_commits(service_stack: ServiceStack, outbox_url):
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    batch = uuid.uuid4().hex
    with psycopg.connect(outbox_url) as conn:
        conn.execute("CREATE TABLE documents (id int PRIMARY KEY)")
        with conn.transaction():
            conn.execute("INSERT INTO documents VALUES (1)")
            jobs_outbox.enqueue(conn, kind="echo", payload=b"kept", labels={"batch": batch})
        with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
            jobs_outbox.enqueue(conn, kind="echo", payload=b"rolled back", labels={"batch": batch})
            conn.execute("INSERT INTO documents VALUES (1)")
    relay = _relay(service_stack, outbox_url, "relay", "--once")
    assert relay.wait(WAIT_SECONDS) == 0
    [row] = _outbox(outbox_url)
    assert row["sent_at"] is not None
    [job] = _jobs_labelled(service_stack.tenant("acme"), batch)
    assert job.job_id == row["job_id"] and job.idempotency_key == f"outbox:{row['submission_uid']}"


def test_a_relay_killed_between_submit_and_mark_leaves_the_job_exactly_once(
    service_stack: ServiceStack, outbox_url, tmp_path: Path
):
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    acme = service_stack.tenant("acme")
    batch = uuid.uuid4().hex
    with psycopg.connect(outbox_url) as conn:
        jobs_outbox.enqueue(conn, kind="echo", payload=b"once", labels={"batch": batch})
    held = tmp_path / "submitted-job-id"
    crashing = _relay(service_stack, outbox_url, "relay-crashing", JOBS_OUTBOX_RELAY_HOLD_AFTER_SUBMIT=str(held))
    wait_until(lambda: held.exists() and held.read_text(), timeout=WAIT_SECONDS, what="the first submission")
    crashing.send_signal(signal.SIGKILL)
    crashing.wait(10)
    [row] = _outbox(outbox_url)
    assert row["sent_at"] is None, "the killed relay's mark must not have committed"
    assert [j.job_id for j in _jobs_labelled(acme, batch)] == [held.read_text()]

    second = _relay(service_stack, outbox_url, "relay-second")
    try:
        wait_until(lambda: _outbox(outbox_url)[0]["sent_at"], timeout=WAIT_SECONDS, what="the row marked sent")
    finally:
        second.terminate()
        second.wait(10)
    [row] = _outbox(outbox_url)
    assert row["job_id"] == held.read_text()
    assert [j.job_id for j in _jobs_labelled(acme, batch)] == [held.read_text()]


def test_several_relays_share_the_outbox_and_submit_each_row_once(service_stack: ServiceStack, outbox_url):
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    batch = uuid.uuid4().hex
    rows = 60
    with psycopg.connect(outbox_url) as conn:
        for n in range(rows):
            jobs_outbox.enqueue(conn, kind="echo", payload=str(n).encode(), labels={"batch": batch})
        jobs_outbox.enqueue(conn, kind="no-such-kind", labels={"batch": batch})
    started = time.monotonic()
    relays = [_relay(service_stack, outbox_url, f"relay-{n}", "--batch-size", "5") for n in range(3)]
    try:
        wait_until(
            lambda: all(r["sent_at"] or r["failed_at"] for r in _outbox(outbox_url)),
            timeout=WAIT_SECONDS,
            what="every row relayed",
        )
    finally:
        for relay in relays:
            relay.terminate()
            relay.wait(10)
    # Reported, not asserted: from the relays' start (their interpreter's start-up included).
    print(f"{rows + 1} rows relayed by 3 relays in {time.monotonic() - started:.2f}s")
    outbox = _outbox(outbox_url)
    sent = [r for r in outbox if r["sent_at"]]
    assert len(sent) == rows and len({r["job_id"] for r in sent}) == rows
    assert len(_jobs_labelled(service_stack.tenant("acme"), batch)) == rows
    [refused] = [r for r in outbox if r["failed_at"]]
    assert refused["kind"] == "no-such-kind" and refused["last_error"].startswith("INVALID_ARGUMENT")


async def test_an_asyncio_service_enqueues_in_its_own_transaction_too(outbox_url):
    async with await psycopg.AsyncConnection.connect(outbox_url) as conn:
        async with conn.transaction():
            kept = await jobs_outbox.enqueue_async(conn, jobs_outbox.Submission("echo", b"a", labels={"k": "v"}))
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await jobs_outbox.enqueue_async(conn, jobs_outbox.Submission("echo", b"rolled back"))
                raise RuntimeError("the caller's own change failed")
    [row] = _outbox(outbox_url)
    assert (row["outbox_id"], bytes(row["payload"]), row["labels"]) == (kept.outbox_id, b"a", {"k": "v"})


def test_a_malformed_submission_is_refused_at_enqueue_in_the_callers_transaction(outbox_url):
    with psycopg.connect(outbox_url) as conn:
        with pytest.raises(jobs_outbox.InvalidSubmission) as refused, conn.transaction():
            jobs_outbox.enqueue(conn, kind="echo", payload=b"kept?", labels={"attempt": 3})  # type: ignore[dict-item]
        assert refused.value.field == "labels['attempt']" and "must be str, not int" in str(refused.value)
        for bad, field in (
            ({"kind": "Echo!"}, "kind"),
            ({"kind": "echo", "priority": 5000}, "priority"),
            ({"kind": "echo", "resource_version": 2}, "resource_version"),
            ({"kind": "echo", "payload": "text, not bytes"}, "payload"),
            ({"kind": "echo", "run_after": datetime(2030, 1, 1)}, "run_after"),
        ):
            with pytest.raises(jobs_outbox.InvalidSubmission) as refused:
                jobs_outbox.enqueue(conn, **bad)
            assert refused.value.field == field
        conn.rollback()
    assert _outbox(outbox_url) == []


def test_the_relay_ends_a_row_it_cannot_send_with_the_reason_and_goes_on(service_stack: ServiceStack, outbox_url):
    """A row written around enqueue's checks (by SQL, or before they existed) once crashed the relay at
    every start, and no row committed after it was ever sent."""
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    batch = uuid.uuid4().hex
    with psycopg.connect(outbox_url) as conn:
        conn.execute("INSERT INTO jobs_outbox (kind, labels) VALUES ('echo', '{\"attempt\": 3}')")
        conn.execute("INSERT INTO jobs_outbox (kind, priority) VALUES ('echo', 2000000000)")
        jobs_outbox.enqueue(conn, kind="echo", payload=b"after", labels={"batch": batch})

    relay = _relay(service_stack, outbox_url, "relay", "--once")

    assert relay.wait(WAIT_SECONDS) == 0
    malformed, out_of_range, good = _outbox(outbox_url)
    assert malformed["failed_at"] and "labels['attempt']" in malformed["last_error"]
    assert out_of_range["failed_at"] and "priority" in out_of_range["last_error"]
    assert good["sent_at"] and [j.job_id for j in _jobs_labelled(service_stack.tenant("acme"), batch)] == [
        good["job_id"]
    ]


def test_a_refusal_no_retry_can_change_ends_the_row_at_once(service_stack: ServiceStack, outbox_url):
    """RESOURCE_DELETED was retried every 60 s for ever; every refusal is classified by one table."""
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    acme = service_stack.tenant("acme")
    acme.submit("echo", b"v1", resource_key="doc:1", resource_version=1)
    acme.stub.DeleteResource(
        jobs_pb2.DeleteResourceRequest(resource_key="doc:1", reason="gone"), metadata=acme.metadata, timeout=10
    )
    with psycopg.connect(outbox_url) as conn:
        jobs_outbox.enqueue(conn, kind="echo", payload=b"v1 again", resource_key="doc:1", resource_version=1)

    assert _relay(service_stack, outbox_url, "relay", "--once").wait(WAIT_SECONDS) == 0

    [row] = _outbox(outbox_url)
    assert row["failed_at"] is not None and row["attempts"] == 1
    assert row["last_error"].startswith("FAILED_PRECONDITION RESOURCE_DELETED:")


def test_a_deletion_travels_through_the_outbox_after_the_versions_written_before_it(
    service_stack: ServiceStack, outbox_url
):
    """Version 2 saved through the outbox, then the document deleted, before the relay ran: the relay
    submitted version 2 after the deletion and it came back. Through the outbox, the deletion follows
    it, and a version written after the deletion brings the key back as a new document."""
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    acme = service_stack.tenant("acme")
    with psycopg.connect(outbox_url) as conn:
        with conn.transaction():
            jobs_outbox.enqueue(conn, kind="echo", payload=b"v2", resource_key="doc:7", resource_version=2)
        with conn.transaction():
            jobs_outbox.enqueue_deletion(conn, resource_key="doc:7", reason="the author deleted it")
        with conn.transaction():
            jobs_outbox.enqueue_deletion(conn, resource_key="doc:never-sent", reason="nothing reached the service")

    assert _relay(service_stack, outbox_url, "relay", "--once").wait(WAIT_SECONDS) == 0

    version_2, deletion, never_sent = _outbox(outbox_url)
    assert version_2["sent_at"] < deletion["sent_at"] and deletion["last_error"] == "deleted up to version 2"
    assert never_sent["sent_at"] and never_sent["last_error"].startswith("nothing to delete")
    assert acme.get(version_2["job_id"]).state == jobs_pb2.JOB_STATE_CANCELLED
    with pytest.raises(grpc.RpcError) as latest:
        acme.stub.GetLatestResult(
            jobs_pb2.GetLatestResultRequest(resource_key="doc:7"), metadata=acme.metadata, timeout=10
        )
    assert latest.value.code() == grpc.StatusCode.NOT_FOUND

    with psycopg.connect(outbox_url) as conn:
        jobs_outbox.enqueue(conn, kind="echo", payload=b"v3", resource_key="doc:7", resource_version=3)
    assert _relay(service_stack, outbox_url, "relay-again", "--once").wait(WAIT_SECONDS) == 0
    assert acme.get(_outbox(outbox_url)[-1]["job_id"]).state == jobs_pb2.JOB_STATE_PENDING


def test_a_keys_rows_wait_behind_an_earlier_one_that_waits_out_a_transient_refusal(outbox_url):
    """The claim itself, without a relay: a key's second row is not claimable while its first is unsent
    (held by a relay, or waiting to retry), and other keys' rows are."""
    with psycopg.connect(outbox_url, row_factory=dict_row) as conn:
        first = jobs_outbox.enqueue(conn, kind="echo", resource_key="doc:1", resource_version=1)
        jobs_outbox.enqueue_deletion(conn, resource_key="doc:1", reason="gone")
        other = jobs_outbox.enqueue(conn, kind="echo", resource_key="doc:2", resource_version=1)
        plain = jobs_outbox.enqueue(conn, kind="echo")
        conn.commit()
        claimable = [r["outbox_id"] for r in conn.execute(jobs_outbox.QUERIES["outbox_claim"], {"limit": 10})]
        assert claimable == [first.outbox_id, other.outbox_id, plain.outbox_id]
        conn.rollback()
        conn.execute("UPDATE jobs_outbox SET next_attempt_at = now() + interval '1 hour' WHERE outbox_id = %s",
                     (first.outbox_id,))  # fmt: skip
        claimable = [r["outbox_id"] for r in conn.execute(jobs_outbox.QUERIES["outbox_claim"], {"limit": 10})]
        assert claimable == [other.outbox_id, plain.outbox_id]
