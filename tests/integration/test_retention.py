"""Retention: finished jobs leave with their history and result once the period is over, and only once
no job depends on them; nothing else."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg.rows import dict_row

from api_service.usecases.submission import SubmissionService
from shared.domain.errors import InvalidArgument
from shared.domain.ids import FencingToken
from shared.domain.jobs import Completion, JobState
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store
from shared.storage.retention import JOB_DELETE_FINISHED, JOB_RETENTION_LOCK, delete_finished_jobs
from tests import factories
from tests.conditions import wait_until
from tests.db_fixtures import POOL_APPLICATION_NAME
from tests.factories import ACTOR_DEFAULT, TENANT_DEFAULT

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


async def _finished_long_ago(sync_db, *job_ids: str) -> None:
    sync_db.execute(
        "UPDATE jobs SET finished_at = now() - interval '8 days' WHERE job_id = ANY(%s::uuid[])", (list(job_ids),)
    )


async def _sweep(db) -> int:
    async with db.transaction() as conn:
        return await delete_finished_jobs(conn, retention_seconds=7 * DAY, limit=100)


@pytest.mark.parametrize("dependent_state", [JobState.BLOCKED, JobState.PENDING, JobState.FAILED])
async def test_a_finished_job_stays_while_a_job_depends_on_it(db, sync_db, dependent_state):
    dependency = await factories.insert_and_claim(db)
    await _complete(db, dependency)
    unfinished = await factories.insert_job(db)
    dependent = await factories.insert_job(db, depends_on=(dependency.job_id, unfinished.job_id))
    await factories.set_state(db, dependent.job_id, dependent_state)
    await _finished_long_ago(sync_db, dependency.job_id)

    assert await _sweep(db) == 0
    assert sync_db.job(dependency.job_id)["state"] == "succeeded"


async def test_a_dependency_goes_once_its_last_dependent_has_gone(db, sync_db):
    dependency = await factories.insert_and_claim(db)
    await _complete(db, dependency)
    dependents = [await factories.insert_job(db, depends_on=(dependency.job_id,)) for _ in range(2)]
    for job in dependents:
        await factories.set_state(db, job.job_id, JobState.CANCELLED)
    await _finished_long_ago(sync_db, dependency.job_id, dependents[0].job_id)

    assert await _sweep(db) == 1, "only the dependent whose retention is over"
    assert await _sweep(db) == 0, "the other dependent still names it"
    await _finished_long_ago(sync_db, dependents[1].job_id)
    assert await _sweep(db) == 1
    assert await _sweep(db) == 1

    assert sync_db.one("SELECT count(*) AS n FROM jobs")["n"] == 0


async def test_a_submission_naming_a_job_that_retention_has_locked_waits_and_is_refused(db, database_url, sync_db):
    """The sweep's delete re-reads dependents after its lock: a submission committed before the lock
    keeps the job, one that comes after waits for the sweep and finds nothing to depend on."""
    dependency = await factories.insert_and_claim(db)
    await _complete(db, dependency)
    await _finished_long_ago(sync_db, dependency.job_id)
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())

    with psycopg.connect(database_url, row_factory=dict_row) as sweeper:
        locked = sweeper.execute(JOB_RETENTION_LOCK, {"retention_seconds": 7 * DAY, "limit": 10}).fetchall()
        assert [str(r["job_id"]) for r in locked] == [dependency.job_id]
        submitting = asyncio.create_task(
            service.submit(TENANT_DEFAULT, ACTOR_DEFAULT, factories.new_job(depends_on=(dependency.job_id,)))
        )
        await wait_until(lambda: _pool_waits_on_a_lock(sync_db), what="the submission to wait for the sweep")
        deleted = sweeper.execute(
            JOB_DELETE_FINISHED, {"job_ids": [r["job_id"] for r in locked], "retention_seconds": 7 * DAY}
        ).fetchall()
        assert len(deleted) == 1
        sweeper.commit()
        with pytest.raises(InvalidArgument):
            await submitting

    assert sync_db.one("SELECT count(*) AS n FROM jobs")["n"] == 0


def _pool_waits_on_a_lock(sync_db) -> bool:
    return bool(
        sync_db.one(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
            (POOL_APPLICATION_NAME,),
        )["n"]
    )
