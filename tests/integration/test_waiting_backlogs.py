"""One tenant's waiting backlog costs the other tenants' claims nothing: jobs throttled behind a key of their
own (their own bound, an operator's limit on it), held by a pushback, or of a paused kind are read at most
once, to be parked (or not at all), never again at every claim; and parked jobs come back, in their queue's
order, as soon as their key has room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Completion, JobState
from shared.domain.limit_keys import WaitingReason, own_key
from shared.storage import job_store, lease_store, queries, scheduling_store
from tests import factories
from tests.integration.test_claim import _nested_plans, _rows_visited

pytestmark = pytest.mark.timeout(120)

A, B = TenantId("tenant-a"), TenantId("tenant-b")
DOC = own_key(A, "doc")
BACKLOG = 1500
CLAIMS = 40
BATCH = 10


def _insert_backlog(sync_db: Any, count: int, *, kind: str = "echo", keys: list[str], bounds: list[int]) -> None:
    """A's waiting jobs, older than anything B queues, in one statement."""
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after, limit_keys,"
        " limit_key_bounds)"
        " SELECT %(tenant)s, %(kind)s, 'pending', '', 3, 3,"
        " clock_timestamp() - interval '1 hour' + g * interval '1 ms', %(keys)s, %(bounds)s"
        " FROM generate_series(1, %(count)s) AS g",
        {"tenant": A, "kind": kind, "keys": keys, "bounds": bounds, "count": count},
    )
    sync_db.execute("ANALYZE jobs")


async def _one_running(db: Any, sync_db: Any, *, keys: list[str], bounds: list[int]) -> Any:
    """One job of A carrying `keys`, older than the backlog, claimed: the key's first running job."""
    (job,) = await factories.insert_jobs(db, 1, tenant=A, run_after=datetime.now(UTC) - timedelta(hours=2))
    factories.add_own_keys(sync_db, job.job_id, keys, bounds)
    (running,) = await factories.claim(db, limit=1)
    assert running.job_id == job.job_id
    return running


def _claims_reading(database_url: str, kinds: list[str]) -> tuple[list[int], list[str]]:
    """CLAIMS claims of BATCH on one connection: the rows of `jobs` each one's statements read, and the
    tenants of what they took."""
    visited, tenants = [], []
    params = {"worker_id": "w", "kinds": kinds, "limit": BATCH, "lease_seconds": 60}
    with psycopg.connect(database_url, autocommit=True) as conn:
        plans = _nested_plans(conn)
        for _ in range(CLAIMS):
            plans.clear()
            tenants += [row[1] for row in conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall()]
            visited.append(_rows_visited(plans))
    return visited, tenants


async def _own_bound(db, sync_db) -> list[str]:
    await _one_running(db, sync_db, keys=[DOC], bounds=[1])
    _insert_backlog(sync_db, BACKLOG, keys=[DOC], bounds=[1])
    return ["echo"]


async def _operator_limit(db, sync_db) -> list[str]:
    factories.set_limit(sync_db, DOC, max_running=1)
    await _one_running(db, sync_db, keys=[DOC], bounds=[0])
    _insert_backlog(sync_db, BACKLOG, keys=[DOC], bounds=[0])
    return ["echo"]


async def _held_key(db, sync_db) -> list[str]:
    async with db.transaction() as conn:
        await scheduling_store.hold_key(conn, DOC, datetime.now(UTC) + timedelta(hours=1))
    _insert_backlog(sync_db, BACKLOG, keys=[DOC], bounds=[0])
    return ["echo"]


async def _held_tenant(db, sync_db) -> list[str]:
    async with db.transaction() as conn:
        await scheduling_store.hold_key(conn, f"tenant:{A}", datetime.now(UTC) + timedelta(hours=1))
    _insert_backlog(sync_db, BACKLOG, keys=[], bounds=[])
    return ["echo"]


async def _paused_kind(db, sync_db) -> list[str]:
    factories.pause_kind(sync_db, "sleep")
    _insert_backlog(sync_db, BACKLOG, kind="sleep", keys=[], bounds=[])
    return ["echo", "sleep"]


@pytest.mark.parametrize(
    "backlog",
    [_own_bound, _operator_limit, _held_key, _held_tenant, _paused_kind],
    ids=lambda f: f.__name__.strip("_"),
)
async def test_a_waiting_backlog_is_read_at_most_once_by_the_claims_that_serve_another_tenant(
    db, sync_db, database_url, backlog
):
    kinds = await backlog(db, sync_db)
    await factories.insert_jobs(db, CLAIMS * BATCH, tenant=B)

    visited, tenants = _claims_reading(database_url, kinds)

    assert tenants == [B] * (CLAIMS * BATCH)
    # Re-read at every claim, the backlog alone would be CLAIMS x BACKLOG rows (60,000).
    assert sum(visited) <= 2 * BACKLOG + CLAIMS * 100, visited
    assert max(visited[-10:]) <= 100, visited


async def test_parked_jobs_come_back_one_at_a_time_in_their_queues_order(db, sync_db):
    running = await _one_running(db, sync_db, keys=[DOC], bounds=[1])
    _insert_backlog(sync_db, 30, keys=[DOC], bounds=[1])
    order = [
        str(r["job_id"]) for r in sync_db.rows("SELECT job_id FROM jobs WHERE state = 'pending' ORDER BY run_after")
    ]

    assert await factories.claim(db, limit=10) == []
    assert await factories.claim(db, limit=10) == []
    assert sync_db.one("SELECT count(*) AS n FROM jobs WHERE parked_on = %s", (DOC,))["n"] > 0
    async with db.transaction() as conn:
        why = await scheduling_store.waiting_reason(conn, A, JobId(order[-1]))
    assert why == WaitingReason("limit_running", DOC)

    started = []
    for _ in range(3):
        await _complete(db, running)
        (running,) = await factories.claim(db, limit=10)
        started.append(running.job_id)
    assert started == order[:3]


async def test_parked_jobs_come_back_when_their_hold_ends_or_their_limit_goes(db, sync_db):
    async with db.transaction() as conn:
        await scheduling_store.hold_key(conn, DOC, datetime.now(UTC) + timedelta(hours=1))
    _insert_backlog(sync_db, 30, keys=[DOC], bounds=[0])
    assert await factories.claim(db, limit=10) == []
    assert sync_db.one("SELECT count(*) AS n FROM jobs WHERE parked_on IS NOT NULL")["n"] == 10

    sync_db.execute("UPDATE job_key_state SET held_until = clock_timestamp() - interval '1 second'")
    assert len(await factories.claim(db, limit=10)) == 10

    factories.set_limit(sync_db, DOC, max_running=10)
    assert len(await factories.claim(db, limit=10)) == 0
    assert sync_db.one("SELECT count(*) AS n FROM jobs WHERE parked_on IS NOT NULL")["n"] > 0
    sync_db.execute("DELETE FROM job_limits")
    assert len(await factories.claim(db, limit=20)) == 20


async def test_a_parked_job_cancelled_then_retried_is_no_longer_parked(db, sync_db):
    running = await _one_running(db, sync_db, keys=[DOC], bounds=[1])
    _insert_backlog(sync_db, 3, keys=[DOC], bounds=[1])
    assert await factories.claim(db, limit=10) == []
    parked = str(
        sync_db.one("SELECT job_id FROM jobs WHERE parked_on IS NOT NULL ORDER BY run_after LIMIT 1")["job_id"]
    )

    async with db.transaction() as conn:
        assert await job_store.cancel(conn, tenant=A, job_id=JobId(parked), actor="t", reason="no") is not None
        reopened = await job_store.reopen(
            conn,
            tenant=A,
            job_id=JobId(parked),
            expected=JobState.CANCELLED,
            next_state=JobState.PENDING,
            actor="t",
            reason="again",
        )
    assert reopened is not None and sync_db.job(parked)["parked_on"] is None

    started = []
    for _ in range(3):  # one at a time: the other two first, older than the retried one
        await _complete(db, running)
        (running,) = await factories.claim(db, limit=10)
        started.append(running.job_id)
    assert started[-1] == parked


async def _complete(db: Any, job: Any) -> None:
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(job.job_id, job.fencing_token, b"")]
        )
