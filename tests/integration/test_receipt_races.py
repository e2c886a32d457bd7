"""An intent of an external call and the lease sweep, raced: whatever the interleaving, either the intent
is refused (and the handler never makes its call) or the sweep sees it and the job waits for a decision
in OUTCOME_UNKNOWN. Never both an accepted intent and an automatic retry. The confirmation of the call,
raced with the sweep and a newer attempt's claim: accepted only while its attempt still holds the job."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg.rows import dict_row

from api_service.usecases.lifecycle import JobLifecycle
from shared.domain.errors import LeaseLost
from shared.domain.jobs import JobState, LeaseRef
from shared.storage import lease_store
from shared.storage.database import Database
from tests import factories
from tests.conditions import wait_until
from tests.db_fixtures import SyncProbe
from worker_service.receipt_book import DatabaseReceiptBook

pytestmark = pytest.mark.timeout(60)

SWEEP_APPLICATION_NAME = "jobs-tests-sweep"
# The pause below holds the sweep at the start of its statement; this advisory key opens it.
SWEEP_PAUSE_LOCK_KEY = 7_319_001
# The pause below holds a confirmation at the start of its statement; this advisory key opens it.
CONFIRM_PAUSE_LOCK_KEY = 7_319_002
# Long enough for the few statements between arranging the lease and recording the intent, on a busy
# machine; the test then waits, on the database clock, for the lease to run out.


def _sweep_waits_on_a_lock(sync_db: SyncProbe) -> bool:
    return bool(
        sync_db.rows(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND wait_event_type = 'Lock'",
            (SWEEP_APPLICATION_NAME,),
        )
    )


def _backends_waiting_on_a_lock(sync_db: SyncProbe) -> int:
    return len(
        sync_db.rows("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
    )


async def _sweep_connection(database_url: str) -> psycopg.AsyncConnection[dict]:
    return await psycopg.AsyncConnection.connect(
        database_url, row_factory=dict_row, application_name=SWEEP_APPLICATION_NAME
    )


async def test_an_intent_after_the_lease_ran_out_is_refused_before_any_sweep(db: Database, sync_db: SyncProbe):
    claimed = await factories.insert_and_claim(db)
    await factories.expire_lease(db, claimed.job_id)
    book = DatabaseReceiptBook(db, LeaseRef(claimed.job_id, claimed.fencing_token))

    with pytest.raises(LeaseLost):
        await book.record_intent("charge", b"request-1")

    assert sync_db.rows("SELECT * FROM job_receipts") == []


async def test_an_intent_waiting_for_the_sweep_is_refused_once_the_sweep_ended_the_lease(
    db: Database, database_url: str, sync_db: SyncProbe
):
    claimed = await factories.insert_and_claim(db)
    await factories.expire_lease(db, claimed.job_id)
    book = DatabaseReceiptBook(db, LeaseRef(claimed.job_id, claimed.fencing_token))

    async with await _sweep_connection(database_url) as sweep:
        swept = (await lease_store.rescue_expired_leases(sweep, limit=10)).moved  # holds the row, not committed
        assert [t.state for t in swept] == [JobState.RETRY_WAIT]
        recording = asyncio.create_task(book.record_intent("charge", b"request-1"))
        await wait_until(
            lambda: bool(sync_db.rows("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'")),
            what="the intent to wait for the sweep's row lock",
        )
        await sweep.commit()
        outcome = (await asyncio.gather(recording, return_exceptions=True))[0]

    assert isinstance(outcome, LeaseLost), "the handler would go on to make its call with nobody to decide"
    assert sync_db.rows("SELECT * FROM job_receipts") == []
    assert sync_db.job(claimed.job_id)["state"] == "retry_wait"


async def test_an_intent_cannot_slip_in_while_the_sweep_holds_the_row_with_an_older_snapshot(
    db: Database, database_url: str, sync_db: SyncProbe
):
    """The sweep locks the expired job, then its UPDATE takes its snapshot and is held there (a test-only
    trigger). An intent arriving now must not commit under that snapshot's nose: it waits for the row,
    and once the sweep has ended the lease it is refused, so no external call is made blind."""
    claimed = await factories.insert_and_claim(db)
    lease = LeaseRef(claimed.job_id, claimed.fencing_token)
    await factories.expire_lease(db, claimed.job_id)
    # Holds every UPDATE of jobs at its start (after its snapshot, before it reads a row) while this
    # session holds the advisory lock.
    sync_db.execute(
        "CREATE FUNCTION test_pause_updates() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM pg_advisory_xact_lock({SWEEP_PAUSE_LOCK_KEY}); RETURN NULL; END $$"
    )
    sync_db.execute(
        "CREATE TRIGGER test_pause_updates BEFORE UPDATE ON jobs"
        " FOR EACH STATEMENT EXECUTE FUNCTION test_pause_updates()"
    )
    sync_db.one("SELECT pg_advisory_lock(%s) AS held", (SWEEP_PAUSE_LOCK_KEY,))

    async with await _sweep_connection(database_url) as sweep:
        sweeping = asyncio.create_task(lease_store.rescue_expired_leases(sweep, limit=10))
        await wait_until(lambda: _sweep_waits_on_a_lock(sync_db), what="the sweep to pause")
        recording = asyncio.create_task(DatabaseReceiptBook(db, lease).record_intent("charge", b"request-1"))
        await wait_until(
            lambda: len(sync_db.rows("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'")) >= 2,
            what="the intent to wait for the row the sweep holds",
        )
        sync_db.one("SELECT pg_advisory_unlock(%s) AS released", (SWEEP_PAUSE_LOCK_KEY,))
        swept = (await sweeping).moved
        await sweep.commit()
        outcome = (await asyncio.gather(recording, return_exceptions=True))[0]

    assert [(t.job_id, t.state) for t in swept] == [(claimed.job_id, JobState.RETRY_WAIT)]
    assert isinstance(outcome, LeaseLost), "the handler would go on to make its call with nobody to decide"
    assert sync_db.rows("SELECT * FROM job_receipts") == []


async def test_a_confirmation_waiting_for_the_sweep_is_refused_once_the_sweep_ended_the_lease(
    db: Database, database_url: str, sync_db: SyncProbe
):
    """The sweep holds the expired job and has found its call unconfirmed (OUTCOME_UNKNOWN, not yet
    committed). A confirmation arriving now must wait for the row and then be refused: accepted, it would
    tell the handler its call was recorded while the job is handed to a person as never confirmed."""
    claimed = await factories.insert_and_claim(db)
    book = DatabaseReceiptBook(db, LeaseRef(claimed.job_id, claimed.fencing_token))
    await book.record_intent("charge", b"request-1")
    await factories.expire_lease(db, claimed.job_id)

    async with await _sweep_connection(database_url) as sweep:
        swept = (await lease_store.rescue_expired_leases(sweep, limit=10)).moved  # holds the row, not committed
        assert [t.state for t in swept] == [JobState.OUTCOME_UNKNOWN]
        confirming = asyncio.create_task(book.confirm("charge", b"charged"))
        # Either it waits for the sweep's row lock, or (without the lock) it is already through.
        await wait_until(
            lambda: confirming.done() or _backends_waiting_on_a_lock(sync_db) >= 1,
            what="the confirmation to wait for the sweep's row lock or to end",
        )
        await sweep.commit()
        outcome = (await asyncio.gather(confirming, return_exceptions=True))[0]

    assert isinstance(outcome, LeaseLost), "a confirmation was accepted after the sweep had ended its lease"
    assert [r["confirmed_at"] for r in sync_db.rows("SELECT confirmed_at FROM job_receipts")] == [None]
    assert sync_db.job(claimed.job_id)["state"] == "outcome_unknown"


async def test_a_confirmation_begun_before_a_newer_attempt_took_the_job_is_refused_after_it(
    db: Database, sync_db: SyncProbe
):
    """A stale confirmation: its statement takes its snapshot while attempt 1 still runs, and is held there
    (a test-only trigger) while the sweep ends the lease, a person retries the job accepting the duplicate
    risk, and attempt 2 claims it. Released, it must not confirm attempt 1's call after attempt 2 began:
    read from its old snapshot, the job row still says attempt 1 runs; locked, it is read as it is now."""
    claimed = await factories.insert_and_claim(db)
    book = DatabaseReceiptBook(db, LeaseRef(claimed.job_id, claimed.fencing_token))
    await book.record_intent("charge", b"request-1")
    # Holds every UPDATE of job_receipts at its start (after its snapshot, before it reads a row) while
    # this session holds the advisory lock.
    sync_db.execute(
        "CREATE FUNCTION test_pause_confirmations() RETURNS trigger LANGUAGE plpgsql AS"
        f" $$ BEGIN PERFORM pg_advisory_xact_lock({CONFIRM_PAUSE_LOCK_KEY}); RETURN NULL; END $$"
    )
    sync_db.execute(
        "CREATE TRIGGER test_pause_confirmations BEFORE UPDATE ON job_receipts"
        " FOR EACH STATEMENT EXECUTE FUNCTION test_pause_confirmations()"
    )
    sync_db.one("SELECT pg_advisory_lock(%s) AS held", (CONFIRM_PAUSE_LOCK_KEY,))

    confirming = asyncio.create_task(book.confirm("charge", b"charged"))
    await wait_until(lambda: _backends_waiting_on_a_lock(sync_db) >= 1, what="the confirmation to pause")
    await factories.expire_lease(db, claimed.job_id)
    assert [t.state for t in await factories.rescue_expired(db)] == [JobState.OUTCOME_UNKNOWN]
    await JobLifecycle(db).retry(
        factories.TENANT_DEFAULT, factories.ACTOR_DEFAULT, claimed.job_id, "checked", accept_duplicate_risk=True
    )
    newer = await factories.claim_one(db)
    assert (newer.job_id, newer.attempt) == (claimed.job_id, 2)
    sync_db.one("SELECT pg_advisory_unlock(%s) AS released", (CONFIRM_PAUSE_LOCK_KEY,))
    outcome = (await asyncio.gather(confirming, return_exceptions=True))[0]

    assert isinstance(outcome, LeaseLost), "attempt 1's call was confirmed after attempt 2 had claimed the job"
    assert [r["confirmed_at"] for r in sync_db.rows("SELECT confirmed_at FROM job_receipts")] == [None]
