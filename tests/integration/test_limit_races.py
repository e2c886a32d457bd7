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
from shared.storage import lease_store, queries
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


def _claim_in_open_transaction(url: str, limit: int, timeout_ms: int) -> tuple[psycopg.Connection, int | None]:
    """Claims on a connection of its own and keeps the transaction open; None when it had to wait."""
    conn = psycopg.connect(url)
    conn.execute(f"SET statement_timeout = {timeout_ms}")
    try:
        claimed = conn.execute(
            queries.JOB_CLAIM_BATCH, {"worker_id": "w", "kinds": ["echo"], "limit": limit, "lease_seconds": 60}
        ).fetchall()
    except psycopg.errors.QueryCanceled:
        conn.rollback()
        return conn, None
    return conn, len(claimed)


async def test_claims_under_a_limit_with_room_for_every_connection_do_not_wait_for_each_other(
    db, database_url, sync_db
):
    # Room for every connection's claim: the key's lock is shared, so a second claim runs while the first
    # one's transaction is still open. (Each takes at most its count of the room over max_connections.)
    max_connections = int(sync_db.one("SHOW max_connections")["max_connections"])
    factories.set_limit(sync_db, "kind:echo", max_running=max_connections * 10 * 2)
    await factories.insert_jobs(db, 20)

    first, taken = _claim_in_open_transaction(database_url, 10, 60_000)
    try:
        second, also = _claim_in_open_transaction(database_url, 10, 2_000)
        second.close()
    finally:
        first.close()

    assert (taken, also) == (10, 10)


async def test_a_claim_near_a_limit_waits_for_the_claim_holding_its_key(db, database_url, sync_db):
    factories.set_limit(sync_db, "kind:echo", max_running=15)
    await factories.insert_jobs(db, 20)

    first, taken = _claim_in_open_transaction(database_url, 10, 60_000)
    try:
        second, also = _claim_in_open_transaction(database_url, 10, 500)
        second.close()
    finally:
        first.close()

    assert (taken, also) == (10, None)
