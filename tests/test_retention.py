"""Retention: finished jobs leave with their history and result once the period is over; nothing else."""

from __future__ import annotations

import pytest

from shared.domain.ids import FencingToken
from shared.domain.jobs import Completion
from shared.storage import lease_store
from shared.storage.retention import delete_finished_jobs
from tests import factories

pytestmark = pytest.mark.timeout(30)

DAY = 24 * 3600.0


async def _complete(db, claimed) -> None:
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(claimed.job_id, FencingToken(claimed.fencing_token), b"r")]
        )


async def test_old_finished_jobs_go_with_their_events_and_results(db, sync_db):
    old = [await factories.insert_and_claim(db) for _ in range(3)]
    for claimed in old:
        await _complete(db, claimed)
    recent = await factories.insert_and_claim(db)
    await _complete(db, recent)
    running = await factories.insert_and_claim(db)
    waiting = await factories.insert_job(db)
    sync_db.execute(
        "UPDATE jobs SET finished_at = now() - interval '8 days' WHERE job_id = ANY(%s::uuid[])",
        ([c.job_id for c in old],),
    )

    async with db.transaction() as conn:
        assert await delete_finished_jobs(conn, retention_seconds=7 * DAY, limit=2) == 2
    async with db.transaction() as conn:
        assert await delete_finished_jobs(conn, retention_seconds=7 * DAY, limit=2) == 1
    async with db.transaction() as conn:
        assert await delete_finished_jobs(conn, retention_seconds=7 * DAY, limit=2) == 0

    kept = {r["job_id"] for r in sync_db.rows("SELECT job_id::text FROM jobs")}
    assert kept == {recent.job_id, waiting.job_id, running.job_id}
    for table in ("job_events", "job_results"):
        orphans = sync_db.one(f"SELECT count(*) AS n FROM {table} WHERE job_id NOT IN (SELECT job_id FROM jobs)")
        assert orphans["n"] == 0, table
    assert sync_db.one("SELECT count(*) AS n FROM job_results")["n"] == 1
