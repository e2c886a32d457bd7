"""History and watchers' notifications are written once per statement: every changed job still gets its
event and its notification, and a WatchJob stream of any of them is woken."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from api_service.job_change_hub import JobChangeHub
from shared.domain.ids import JobId
from shared.domain.jobs import Completion, LeaseRef
from shared.storage import lease_store
from shared.storage.notifications import CHANGED_CHANNEL
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(60)

# More than one notification's worth (100 changes per payload), so the watched job is not in the first.
JOBS_IN_ONE_STATEMENT = 250


def _cancel_all_in_one_statement(sync_db) -> int:
    """One UPDATE that is a transition (a cancel request raises `sequence`) for every job."""
    return sync_db.execute(
        "UPDATE jobs SET cancel_requested = true, transition_actor = 'tenant:t', transition_reason = 'cancel'"
    )


def _watched(sync_db, seconds: float = 60.0) -> None:
    """What an API process with a WatchJob stream open keeps: statements notify while it is live."""
    sync_db.execute(
        "INSERT INTO job_change_watchers (listener, expires_at)"
        " VALUES ('test', clock_timestamp() + make_interval(secs => %s))",
        (seconds,),
    )


def _changes_heard(database_url: str, make_changes) -> list[str]:
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANGED_CHANNEL}")
        make_changes()
        return [n.payload for n in listener.notifies(timeout=1.0)]


async def test_one_statement_records_one_event_and_one_notification_per_changed_job(db, sync_db, database_url):
    jobs = await factories.insert_jobs(db, JOBS_IN_ONE_STATEMENT)
    _watched(sync_db)
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANGED_CHANNEL}")
        assert _cancel_all_in_one_statement(sync_db) == JOBS_IN_ONE_STATEMENT
        payloads = [n.payload for n in listener.notifies(timeout=2.0)]
    notified = [change for payload in payloads for change in payload.split(",")]
    assert sorted(notified) == sorted(f"{job.job_id}:{job.sequence + 1}" for job in jobs)
    assert len(payloads) < JOBS_IN_ONE_STATEMENT  # packed, not one per job
    events = sync_db.rows(
        "SELECT job_id::text, from_state::text, to_state::text, actor, reason FROM job_events WHERE sequence = 2"
    )
    assert sorted(e["job_id"] for e in events) == sorted(job.job_id for job in jobs)
    assert {(e["from_state"], e["to_state"], e["actor"], e["reason"]) for e in events} == {
        ("pending", "pending", "tenant:t", "cancel")
    }


async def test_nothing_is_notified_while_no_watcher_is_registered(db, sync_db, database_url):
    # Notifying makes every commit take one lock all notifying commits share; nobody listens most of the time.
    sync_db.execute(
        "INSERT INTO job_change_watchers (listener, expires_at) VALUES ('gone', clock_timestamp() - interval '1 s')"
    )

    def changes() -> None:
        # An insert, then a transition of the job it made (a cancel request raises its sequence).
        sync_db.execute(
            "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)"
            " VALUES ('t', 'echo', 'pending', '', 1, 1)"
        )
        sync_db.execute("UPDATE jobs SET cancel_requested = true WHERE NOT cancel_requested")

    assert _changes_heard(database_url, changes) == []
    _watched(sync_db)
    heard = _changes_heard(database_url, changes)
    assert [payload.partition(":")[2] for payload in heard] == ["1", "2"]


async def test_a_hub_registers_before_its_first_stream_reads_and_wakes_it_again_once_settled(db, database_url, sync_db):
    job = await factories.insert_job(db)
    hub = JobChangeHub(database_url, db, settle_seconds=0.2)
    async with hub.subscribe(JobId(job.job_id)) as changed:
        live = sync_db.one("SELECT count(*) AS n FROM job_change_watchers WHERE expires_at > clock_timestamp()")
        assert live["n"] == 1
        # Not listening yet, and nothing changed: only the read after the registration settled wakes it.
        await wait_until(changed.is_set, within_seconds=20, what="the stream's read once the registration settled")


async def test_a_watcher_is_woken_when_its_job_changes_among_many_in_one_statement(db, sync_db, database_url):
    jobs = await factories.insert_jobs(db, JOBS_IN_ONE_STATEMENT)
    hub = JobChangeHub(database_url, db)
    async with hub.subscribe(JobId(jobs[-1].job_id)) as changed:
        listening = asyncio.create_task(hub.run())
        try:
            await wait_until(changed.is_set, within_seconds=20, what="the hub's first wake-up once it listens")
            changed.clear()
            await asyncio.to_thread(_cancel_all_in_one_statement, sync_db)
            await wait_until(changed.is_set, within_seconds=20, what="the watched job's notification")
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)


async def test_the_sequence_rises_by_one_per_transition_whichever_statement_makes_it(db, sync_db):
    # The claim and the completion raise it in the row they write, the row trigger for every other
    # statement (a cancel request here); none raises it twice, and a lease extension does not raise it.
    job = await factories.insert_job(db)
    claimed = await factories.claim_one(db)
    async with db.transaction() as conn:
        await lease_store.heartbeat(conn, [LeaseRef(claimed.job_id, claimed.fencing_token)], lease_seconds=60)
    sync_db.execute(
        "UPDATE jobs SET cancel_requested = true, transition_reason = 'cancel' WHERE job_id = %s", (job.job_id,)
    )
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(claimed.job_id, claimed.fencing_token, b"")]
        )

    events = sync_db.rows(
        "SELECT sequence, from_state::text, to_state::text, reason FROM job_events WHERE job_id = %s ORDER BY sequence",
        (job.job_id,),
    )
    assert [(e["sequence"], e["from_state"], e["to_state"], e["reason"]) for e in events] == [
        (1, None, "pending", "submitted"),
        (2, "pending", "running", "claimed"),
        (3, "running", "running", "cancel"),
        (4, "running", "cancelled", "cancelled; result discarded"),
    ]
    assert sync_db.job(job.job_id)["sequence"] == 4


async def test_a_sequence_a_statement_writes_against_the_rule_is_replaced_by_the_rules(db, sync_db):
    job = await factories.insert_job(db)
    sync_db.execute("UPDATE jobs SET sequence = 99 WHERE job_id = %s", (job.job_id,))
    assert sync_db.job(job.job_id)["sequence"] == 1
    sync_db.execute("UPDATE jobs SET sequence = 7, cancel_requested = true WHERE job_id = %s", (job.job_id,))
    assert sync_db.job(job.job_id)["sequence"] == 2
    assert sync_db.rows("SELECT sequence FROM job_events WHERE job_id = %s ORDER BY 1", (job.job_id,)) == [
        {"sequence": 1},
        {"sequence": 2},
    ]


async def test_a_plan_kept_from_a_one_row_statement_records_every_row_of_a_large_one(db, sync_db):
    # The history trigger's plan lasts the session: made at a one-row transition, it is reused for a
    # statement of many rows, and the transition tables' join must still pair every row with its old self.
    jobs = await factories.insert_jobs(db, JOBS_IN_ONE_STATEMENT)
    first = jobs[0].job_id
    assert (
        sync_db.execute(
            "UPDATE jobs SET cancel_requested = true, transition_actor = 'tenant:t', transition_reason = 'one'"
            " WHERE job_id = %s",
            (first,),
        )
        == 1
    )
    assert _cancel_all_in_one_statement(sync_db) == JOBS_IN_ONE_STATEMENT
    events = sync_db.rows("SELECT job_id::text, sequence, reason FROM job_events WHERE sequence > 1")
    # The first job's second UPDATE changes nothing a transition is made of: no event for it.
    assert sorted((e["job_id"], e["sequence"], e["reason"]) for e in events) == sorted(
        [(first, 2, "one")] + [(job.job_id, 2, "cancel") for job in jobs[1:]]
    )
