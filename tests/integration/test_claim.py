"""The claim: one statement that takes runnable rows under a new lease, safe under any number of claimers."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from shared.domain.jobs import JobState, LeaseRef
from shared.storage import lease_store, queries
from tests import factories

pytestmark = pytest.mark.timeout(60)

RACE_ROWS = 500
RACE_CLAIMERS = 8
RACE_BATCH_MAX = 7


async def _claim_until_drained(url: str, worker_id: str, claimed: list[str], total: int) -> list[str]:
    """Claims small random batches on its own connection until every row has been claimed by someone."""
    mine: list[str] = []
    rng = random.Random(worker_id)
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        while len(claimed) < total:
            async with conn.transaction():
                batch = await lease_store.claim_batch(
                    conn, worker_id=worker_id, kinds=["echo"], limit=rng.randint(1, RACE_BATCH_MAX), lease_seconds=60
                )
            ids = [job.job_id for job in batch]
            mine += ids
            claimed += ids
    return mine


async def test_racing_claimers_take_every_row_exactly_once(db, database_url, sync_db):
    jobs = await factories.insert_jobs(db, RACE_ROWS)
    claimed: list[str] = []

    async with asyncio.timeout(30):
        per_worker = await asyncio.gather(
            *(_claim_until_drained(database_url, f"worker-{n}", claimed, RACE_ROWS) for n in range(RACE_CLAIMERS))
        )

    assert len(claimed) == len(set(claimed)) == RACE_ROWS
    assert set(claimed) == {job.job_id for job in jobs}
    assert sum(1 for mine in per_worker if mine) > 1, "the claimers never actually overlapped"
    rows = sync_db.rows("SELECT job_id::text, state, attempts, fencing_token, lease_owner FROM jobs")
    owner_of = {job_id: f"worker-{n}" for n, mine in enumerate(per_worker) for job_id in mine}
    for row in rows:
        assert (row["state"], row["attempts"], row["fencing_token"]) == ("running", 1, 1)
        assert row["lease_owner"] == owner_of[row["job_id"]]


async def test_a_batch_respects_its_limit(db):
    await factories.insert_jobs(db, 10)

    sizes = [len(await factories.claim(db, limit=3)) for _ in range(5)]

    assert sizes == [3, 3, 3, 1, 0]


async def test_the_fencing_token_rises_with_every_claim_of_the_same_job(db, sync_db):
    job = await factories.insert_job(db, max_attempts=10)
    first = await factories.claim_one(db)
    tokens = [first.fencing_token]
    for _ in range(3):
        again = await factories.reclaim(db, job.job_id)
        tokens.append(again.fencing_token)
    # A hand-back of an unstarted attempt refunds the attempt but never the token.
    async with db.transaction() as conn:
        await lease_store.release(
            conn,
            worker_id="worker-1",
            lease=LeaseRef(job.job_id, tokens[-1]),
            started=False,
            reason="shutdown",
        )
    tokens.append((await factories.claim_one(db)).fencing_token)

    assert tokens == [1, 2, 3, 4, 5]
    assert sync_db.job(job.job_id)["attempts"] == 4


async def test_a_short_lease_expires_and_the_next_claim_gets_a_higher_token(db, sync_db):
    job = await factories.insert_job(db)
    first = await factories.claim_one(db, lease_seconds=0.05)

    async with asyncio.timeout(10):
        rescued: list[lease_store.Transition] = []
        while not rescued:
            rescued = await factories.rescue_expired(db)
    second = await factories.claim_one(db)

    assert rescued[0].job_id == job.job_id
    assert second.fencing_token == first.fencing_token + 1
    assert second.attempt == 2


async def test_a_claim_takes_only_the_given_kinds(db):
    echo = await factories.insert_jobs(db, 3, kind="echo")
    sleep = await factories.insert_jobs(db, 2, kind="sleep")

    claimed = await factories.claim(db, kinds=["sleep", "flaky"], limit=10)

    assert {c.job_id for c in claimed} == {j.job_id for j in sleep}
    assert {c.job_id for c in await factories.claim(db, kinds=["echo"], limit=10)} == {j.job_id for j in echo}
    assert await factories.claim(db, kinds=["summarize"], limit=10) == []


async def test_a_claim_takes_the_highest_priority_then_the_longest_waiting(db):
    now = datetime.now(UTC)
    arranged = [(0, 5), (5, 3), (-3, 9), (5, 1), (10, 0), (0, 2)]  # (priority, seconds ago)
    jobs = [
        await factories.insert_job(db, priority=priority, run_after=now - timedelta(seconds=ago))
        for priority, ago in arranged
    ]
    expected = [jobs[i].job_id for i in sorted(range(len(arranged)), key=lambda i: (-arranged[i][0], -arranged[i][1]))]

    order = [(await factories.claim_one(db)).job_id for _ in jobs]

    assert order == expected


async def test_a_job_waiting_for_its_run_after_or_past_its_deadline_is_not_claimed(db):
    now = datetime.now(UTC)
    await factories.insert_job(db, run_after=now + timedelta(hours=1))
    await factories.insert_job(db, deadline=now - timedelta(seconds=1))
    due = await factories.insert_job(db, run_after=now - timedelta(seconds=1))

    claimed = await factories.claim(db, limit=10)

    assert [c.job_id for c in claimed] == [due.job_id]


async def test_a_claim_ignores_running_and_finished_jobs(db, sync_db):
    running = await factories.insert_and_claim(db)
    finished = await factories.insert_job(db)
    await factories.set_state(db, finished.job_id, JobState.SUCCEEDED)

    assert await factories.claim(db, limit=10) == []
    assert sync_db.job(running.job_id)["fencing_token"] == 1


async def test_the_claim_uses_the_runnable_index(db, sync_db, database_url):
    # Finished history dwarfs the runnable rows, as in production; ANALYZE makes the planner know it.
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, finished_at)"
        " SELECT 'tenant-a', 'echo', 'succeeded', '', 3, 3, clock_timestamp() FROM generate_series(1, 5000)"
    )
    await factories.insert_jobs(db, 20)
    sync_db.execute("ANALYZE jobs")

    # The claim runs inside jobs_claim, whose plans only auto_explain's nested statements show.
    with psycopg.connect(database_url) as conn:
        plans = _nested_plans(conn)
        claimed = _claim(conn, limit=10)
        conn.rollback()

    assert len(claimed) == 10
    assert "jobs_runnable_idx" in _index_names(plans), json.dumps(plans, indent=1)


async def test_a_claim_planned_on_an_empty_queue_still_reads_only_a_batch_of_a_long_one(db, database_url):
    # The claim's plan is made once per session: here while the queue is empty, then a burst lands with
    # no ANALYZE between, as between two autoanalyze runs.
    with psycopg.connect(database_url) as conn:
        _claim(conn, limit=10)
        conn.rollback()
        await factories.insert_jobs(db, 5000)

        plans = _nested_plans(conn)
        claimed = _claim(conn, limit=10)
        conn.rollback()

    assert len(claimed) == 10
    assert "jobs_tenant_queued_idx" not in _index_names(plans), json.dumps(plans, indent=1)
    assert _most_rows_read(plans) <= 100, json.dumps(plans, indent=1)


async def test_claims_and_completions_find_their_rows_by_key_on_statistics_of_a_quiet_queue(db, sync_db, database_url):
    # Statistics taken while nothing was queued or running (a quiet night's VACUUM ANALYZE), then a burst:
    # a plan trusting them reads every runnable or running row for each job it claims or completes.
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, finished_at)"
        " SELECT 'tenant-a', 'echo', 'succeeded', '', 3, 3, clock_timestamp() FROM generate_series(1, 50000)"
    )
    sync_db.execute("VACUUM ANALYZE jobs")
    await factories.insert_jobs(db, 3000)
    running = await factories.claim(db, limit=1000)

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        plans = _nested_plans(conn)
        claimed = _claim(conn, limit=200)
        completion = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + queries.JOB_COMPLETE_BATCH,
            {
                "job_ids": [job.job_id for job in running[:200]],
                "fencing_tokens": [job.fencing_token for job in running[:200]],
                "results": [b""] * 200,
                "worker_id": "w",
            },
        ).fetchone()
        conn.rollback()

    assert len(claimed) == 200
    assert _most_rows_read(plans) <= 4 * 200, json.dumps(plans, indent=1)
    assert _most_rows_read(completion["QUERY PLAN"]) <= 200, json.dumps(completion, indent=1)


async def test_a_claimer_racing_another_on_one_queue_takes_the_rows_after_its_rivals_in_one_pass(db, database_url):
    # One tenant's queue of one kind, as a bulk import makes it: fair shares have nothing to decide. A
    # rival holds the head of the queue (its claim is not committed); the claim locks the rows after it as
    # it reads them, where reading candidates first and locking them after found the head locked and read
    # the queue again past it.
    await factories.insert_jobs(db, 300)
    with psycopg.connect(database_url) as rival, psycopg.connect(database_url) as conn:
        held = _claim(rival, limit=100)
        plans = _nested_plans(conn)
        claimed = _claim(conn, limit=100)
        conn.rollback()
        rival.rollback()

    assert len(held) == len(claimed) == 100
    assert not {row[0] for row in held} & {row[0] for row in claimed}
    # The rival's rows and the claimed ones, read once each, and the claimed ones written by key.
    assert _rows_visited(plans) <= 3 * 100 + 10, json.dumps(plans, indent=1)


async def test_jobs_claimed_while_nothing_is_limited_count_against_a_limit_set_later(db, sync_db):
    # The one-queue claim records the keys a job runs under (the kind's declared ones too), as the fair
    # claim does: a limit an operator sets afterwards counts the jobs already running.
    factories.declare_kind_keys(sync_db, "echo", ["provider:x"])
    await factories.insert_jobs(db, 5)
    assert len(await factories.claim(db, limit=3)) == 3

    factories.set_limit(sync_db, "provider:x", max_running=4)
    assert len(await factories.claim(db, limit=10)) == 1
    assert sync_db.rows("SELECT DISTINCT running_keys FROM jobs WHERE state = 'running'") == [
        {"running_keys": ["kind:echo", "tenant:tenant-a", "provider:x"]}
    ]


def _claim(conn: psycopg.Connection[Any], *, limit: int) -> list[Any]:
    return conn.execute(
        queries.JOB_CLAIM_BATCH, {"worker_id": "w", "kinds": ["echo"], "limit": limit, "lease_seconds": 30}
    ).fetchall()


def _nested_plans(conn: psycopg.Connection[Any]) -> list[object]:
    """From now on, the plan of every statement the connection runs, nested ones included."""
    plans: list[object] = []

    def keep_plan(notice: psycopg.errors.Diagnostic) -> None:
        _, marker, plan = (notice.message_primary or "").partition("plan:")
        if marker:
            plans.append(json.loads(plan))

    conn.add_notice_handler(keep_plan)
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET auto_explain.log_format = json",
        "SET auto_explain.log_level = notice",
    ):
        conn.execute(setting)
    return plans


def _most_rows_read(plan: object) -> int:
    """The most rows any one scan of `jobs` produced, over all its loops."""
    if isinstance(plan, dict):
        own = plan.get("Actual Rows", 0) * plan.get("Actual Loops", 1) if plan.get("Relation Name") == "jobs" else 0
        return max([own, *(_most_rows_read(value) for value in plan.values())])
    if isinstance(plan, list):
        return max([0, *(_most_rows_read(item) for item in plan)])
    return 0


def _rows_visited(plan: object) -> int:
    """Rows of `jobs` every scan in the plans read, kept or filtered out, over all their loops."""
    if isinstance(plan, dict):
        own = 0
        if plan.get("Relation Name") == "jobs" and "Scan" in plan.get("Node Type", ""):
            own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
        return own + sum(_rows_visited(value) for value in plan.values())
    if isinstance(plan, list):
        return sum(_rows_visited(item) for item in plan)
    return 0


def _index_names(plan: object) -> set[str]:
    if isinstance(plan, dict):
        found = {plan["Index Name"]} if "Index Name" in plan else set()
        return found.union(*(_index_names(value) for value in plan.values()))
    if isinstance(plan, list):
        return set().union(*(_index_names(item) for item in plan))
    return set()
