"""Checkpoints and progress in the database: each write fenced by the lease in the statement that writes,
bounded, and gone with their job."""

from __future__ import annotations

import pytest

from shared.domain.checkpoints import Checkpoint, ProgressReport
from shared.domain.ids import FencingToken
from shared.domain.jobs import Completion, JobState, LeaseRef, ReportOutcome
from shared.storage import checkpoint_store, lease_store, progress_store
from shared.storage.retention import delete_finished_jobs
from tests import factories

pytestmark = pytest.mark.timeout(30)


async def _record(db, lease: LeaseRef, stage: str, data: bytes = b"x", max_stages: int = 32):
    async with db.transaction() as conn:
        return await checkpoint_store.record(conn, lease, stage, data, max_stages=max_stages)


async def test_only_the_current_lease_records_a_checkpoint(db, sync_db):
    claimed = await factories.insert_and_claim(db)
    current = LeaseRef(claimed.job_id, claimed.fencing_token)
    stale = LeaseRef(claimed.job_id, FencingToken(claimed.fencing_token + 1))  # any other token is not the lease

    assert await _record(db, stale, "extract") is ReportOutcome.LEASE_LOST
    stored = await _record(db, current, "extract", b'{"uri": "s3://x"}')
    assert isinstance(stored, Checkpoint) and stored.attempt == 1 and stored.fencing_token == claimed.fencing_token
    assert stored.json() == {"uri": "s3://x"}
    rows = sync_db.rows("SELECT stage, fencing_token FROM job_checkpoints")
    assert rows == [{"stage": "extract", "fencing_token": claimed.fencing_token}]


async def test_a_finished_jobs_checkpoint_is_refused_with_its_reason(db):
    claimed = await factories.insert_and_claim(db)
    await factories.set_state(db, claimed.job_id, JobState.CANCELLED)
    outcome = await _record(db, LeaseRef(claimed.job_id, claimed.fencing_token), "extract")
    assert outcome is ReportOutcome.JOB_CANCELLED


async def test_a_job_holds_a_bounded_number_of_stages_and_a_stage_recorded_again_is_replaced(db, sync_db):
    claimed = await factories.insert_and_claim(db)
    lease = LeaseRef(claimed.job_id, claimed.fencing_token)
    for stage in ("a", "b", "c"):
        assert isinstance(await _record(db, lease, stage, max_stages=3), Checkpoint)
    with pytest.raises(checkpoint_store.NoRoomForStage):
        await _record(db, lease, "d", max_stages=3)
    replaced = await _record(db, lease, "b", b"again", max_stages=3)
    assert isinstance(replaced, Checkpoint) and replaced.data == b"again"
    assert sync_db.one("SELECT count(*) AS n FROM job_checkpoints")["n"] == 3


async def test_progress_is_fenced_per_report_and_counts_its_writes(db, sync_db):
    first = await factories.insert_and_claim(db)
    second = await factories.insert_and_claim(db)
    reports = [
        ProgressReport(LeaseRef(first.job_id, first.fencing_token), 0.25, "a quarter"),
        ProgressReport(LeaseRef(second.job_id, FencingToken(second.fencing_token + 1)), 0.5, "not the lease"),
    ]
    async with db.transaction() as conn:
        assert await progress_store.record_batch(conn, reports) == [ReportOutcome.ACCEPTED, ReportOutcome.LEASE_LOST]
    async with db.transaction() as conn:
        await progress_store.record_batch(conn, [ProgressReport(reports[0].lease, 0.75, "three quarters")])
        progress = await progress_store.get(conn, factories.TENANT_DEFAULT, first.job_id)
        assert await progress_store.get(conn, factories.TENANT_DEFAULT, second.job_id) is None
    assert progress is not None and (progress.fraction, progress.message, progress.attempt) == (
        0.75,
        "three quarters",
        1,
    )
    assert sync_db.one("SELECT revision FROM job_progress")["revision"] == 2


async def test_retention_deletes_checkpoints_and_progress_with_their_job(db, sync_db):
    claimed = await factories.insert_and_claim(db)
    lease = LeaseRef(claimed.job_id, claimed.fencing_token)
    await _record(db, lease, "extract")
    async with db.transaction() as conn:
        await progress_store.record_batch(conn, [ProgressReport(lease, 1.0, "done")])
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(lease.job_id, lease.fencing_token, b"r")]
        )
    sync_db.execute("UPDATE jobs SET finished_at = now() - interval '8 days' WHERE job_id = %s::uuid", (lease.job_id,))
    async with db.transaction() as conn:
        assert await delete_finished_jobs(conn, retention_seconds=7 * 24 * 3600.0, limit=10) == 1
    for table in ("job_checkpoints", "job_progress"):
        assert sync_db.one(f"SELECT count(*) AS n FROM {table}")["n"] == 0, table
