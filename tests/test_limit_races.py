"""Limits under racing claimers: four claimers on their own connections, each claiming and completing as
fast as it can, never have one more job of a key running than its limit allows.

The proof reads the database's own clock stamps: a job runs from its claim's `started_at` to its
completion's `finished_at`. A claimer counts a key's running jobs only after taking the key's lock, in a
statement begun after every earlier claim and completion of the key committed, so with the limit enforced
no two intervals overlap beyond it; without the lock (or without the count) they do.
"""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest
from psycopg.rows import dict_row

from shared.domain.ids import TenantId
from shared.domain.jobs import Completion
from shared.storage import lease_store
from tests import factories

pytestmark = pytest.mark.timeout(120)

CLAIMERS = 4
JOBS = 160
BATCH_MAX = 4


async def _claim_and_complete(url: str, worker_id: str, kinds: list[str], done: set[str], total: int) -> int:
    """Claims small random batches and completes them at once, until every job is done by someone."""
    rng = random.Random(worker_id)
    mine = 0
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row, autocommit=True) as conn:
        while len(done) < total:
            async with conn.transaction():
                batch = await lease_store.claim_batch(
                    conn, worker_id=worker_id, kinds=kinds, limit=rng.randint(1, BATCH_MAX), lease_seconds=60
                )
            if not batch:
                await asyncio.sleep(0.001 * rng.randint(0, 3))  # let another claimer's completion land
                continue
            mine += len(batch)
            async with conn.transaction():
                await lease_store.complete_batch(
                    conn, worker_id=worker_id, completions=[Completion(j.job_id, j.fencing_token, b"") for j in batch]
                )
            done.update(j.job_id for j in batch)
    return mine


def _most_running_at_once(sync_db, where: str) -> int:
    rows = sync_db.rows(f"SELECT started_at, finished_at FROM jobs WHERE state = 'succeeded' AND {where}")
    # At equal stamps an end comes before a start: the slot was free by then.
    edges = sorted([(r["started_at"], 1) for r in rows] + [(r["finished_at"], -1) for r in rows])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


async def _race(database_url: str, kinds: list[str], total: int) -> list[int]:
    done: set[str] = set()
    async with asyncio.timeout(90):
        return await asyncio.gather(
            *(_claim_and_complete(database_url, f"worker-{n}", kinds, done, total) for n in range(CLAIMERS))
        )


async def test_racing_claimers_never_run_more_than_a_keys_limit(db, database_url, sync_db):
    factories.declare_kind_keys(sync_db, "echo", ["provider:x"])
    factories.declare_kind_keys(sync_db, "sleep", ["provider:x"])
    factories.set_limit(sync_db, "provider:x", max_running=3)
    await factories.insert_jobs(db, JOBS // 2, tenant=factories.TENANT_DEFAULT)
    await factories.insert_jobs(db, JOBS // 2, tenant=TenantId("tenant-b"), kind="sleep")

    per_claimer = await _race(database_url, ["echo", "sleep"], JOBS)

    assert sum(per_claimer) == JOBS
    assert sum(1 for n in per_claimer if n) > 1, "the claimers never actually overlapped"
    assert _most_running_at_once(sync_db, "true") == 3


async def test_racing_claimers_run_one_job_of_a_document_at_a_time(db, database_url, sync_db):
    jobs = await factories.insert_jobs(db, JOBS)
    for n, job in enumerate(jobs):
        factories.add_own_keys(sync_db, job.job_id, [f"tenant:tenant-a/doc:{n % 2}"], [1])

    per_claimer = await _race(database_url, ["echo"], JOBS)

    assert sum(per_claimer) == JOBS
    assert sum(1 for n in per_claimer if n) > 1, "the claimers never actually overlapped"
    for doc in (0, 1):
        assert _most_running_at_once(sync_db, f"limit_keys = ARRAY['tenant:tenant-a/doc:{doc}']") == 1
