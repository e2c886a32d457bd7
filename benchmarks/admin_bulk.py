"""Bulk cancel and retry through the admin use-cases, over jobs of several tenants: how fast, and how
long one batch (one transaction, holding its jobs' row locks) lasts on average."""

from __future__ import annotations

import time

import psycopg

from api_service.usecases.admin_jobs import BULK_BATCH_SIZE, AdminJobs
from api_service.usecases.job_queries import JobQueries
from benchmarks.harness import TENANTS, plain_insert_params
from shared.domain.admin import Actor, BulkRequest, JobFilter
from shared.storage import queries
from shared.storage.database import Database, PoolSettings

INSERT_BATCH = 1000


def _insert(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for offset in range(0, jobs, INSERT_BATCH):
            n = min(INSERT_BATCH, jobs - offset)
            conn.execute(
                queries.JOB_INSERT_MANY,
                plain_insert_params(TENANTS[(offset // INSERT_BATCH) % len(TENANTS)], n, labels={"batch": "bench"}),
            )


async def bulk_actions(url: str, jobs: int) -> dict[str, float]:
    """Jobs per second for a dry run, a bulk cancel and a bulk retry of `jobs` pending jobs."""
    _insert(url, jobs)
    db = await Database.open(PoolSettings(url, max_size=2, application_name="jobs-bench"), wait=True)
    admin, actor, matching = AdminJobs(db, JobQueries(db)), Actor("admin:bench"), JobFilter(labels={"batch": "bench"})
    figures: dict[str, float] = {}
    try:
        for name, run in (
            ("dry_run", lambda: admin.cancel_jobs(actor, BulkRequest(matching, "bench", dry_run=True))),
            ("cancel", lambda: admin.cancel_jobs(actor, BulkRequest(matching, "bench", False, expected_count=jobs))),
            ("retry", lambda: admin.retry_jobs(actor, BulkRequest(matching, "bench", False, expected_count=jobs))),
        ):
            started = time.perf_counter()
            outcome = await run()
            seconds = time.perf_counter() - started
            if outcome.matched != jobs or (name != "dry_run" and outcome.changed != jobs):
                raise RuntimeError(f"bulk {name}: {outcome}")
            figures[f"{name}_jobs_per_s"] = jobs / seconds
            if name != "dry_run":
                figures[f"{name}_batch_ms"] = 1000 * seconds / -(-jobs // BULK_BATCH_SIZE)
    finally:
        await db.close()
    return figures
