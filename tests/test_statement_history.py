"""History and watchers' notifications are written once per statement: every changed job still gets its
event and its notification, and a WatchJob stream of any of them is woken."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from api_service.job_change_hub import JobChangeHub
from shared.domain.ids import JobId
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


async def test_one_statement_records_one_event_and_one_notification_per_changed_job(db, sync_db, database_url):
    jobs = await factories.insert_jobs(db, JOBS_IN_ONE_STATEMENT)
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


async def test_a_watcher_is_woken_when_its_job_changes_among_many_in_one_statement(db, sync_db, database_url):
    jobs = await factories.insert_jobs(db, JOBS_IN_ONE_STATEMENT)
    hub = JobChangeHub(database_url)
    with hub.subscribe(JobId(jobs[-1].job_id)) as changed:
        listening = asyncio.create_task(hub.run())
        try:
            await wait_until(changed.is_set, within_seconds=20, what="the hub's first wake-up once it listens")
            changed.clear()
            await asyncio.to_thread(_cancel_all_in_one_statement, sync_db)
            await wait_until(changed.is_set, within_seconds=20, what="the watched job's notification")
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
