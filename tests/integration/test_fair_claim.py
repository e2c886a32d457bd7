"""The claim's order and its limits over a real database: fair shares across tenants, paused kinds and full
keys passed over (never waited behind), rate buckets, holds, and slots freed by every way a job stops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Completion, ErrorCategory, JobError, JobState, LeaseRef
from shared.domain.limit_keys import WaitingReason, scope_submission_keys
from shared.storage import lease_store, queries, scheduling_store
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.conditions import wait_until
from tests.database_roles import ServiceLogins
from worker_service.background_loops import fold_key_charges

pytestmark = pytest.mark.timeout(60)

A, B, C = TenantId("tenant-a"), TenantId("tenant-b"), TenantId("tenant-c")


def _tenants(claimed) -> Counter[str]:
    return Counter(job.tenant for job in claimed)


async def test_a_flooding_tenant_does_not_make_another_wait_behind_its_backlog(db):
    await factories.insert_jobs(db, 200, tenant=A)
    late = await factories.insert_jobs(db, 3, tenant=B)

    claimed = await factories.claim(db, limit=4)

    assert _tenants(claimed) == {A: 2, B: 2}
    assert {job.job_id for job in claimed if job.tenant == B} == {job.job_id for job in late[:2]}


async def test_a_tenant_with_fewer_jobs_than_its_share_leaves_the_rest_of_the_batch_to_the_others(db):
    # B runs nothing, so its share is the whole batch; it has one job, and A's take the other nine places.
    await factories.insert_jobs(db, 30, tenant=A)
    await factories.claim(db, limit=10)
    (late,) = await factories.insert_jobs(db, 1, tenant=B)

    claimed = await factories.claim(db, limit=10)

    assert _tenants(claimed) == {A: 9, B: 1}
    assert late.job_id in {job.job_id for job in claimed}


async def test_every_job_of_the_top_priority_goes_before_any_of_a_lower_one_across_tenants(db):
    # Both tenants' next jobs have priority 5, but A has only two: B's take the rest of the batch, and none
    # of A's priority-0 jobs starts before B's priority-5 ones.
    await factories.insert_jobs(db, 2, tenant=A, priority=5)
    await factories.insert_jobs(db, 10, tenant=A)
    await factories.insert_jobs(db, 10, tenant=B, priority=5)

    claimed = await factories.claim(db, limit=10)

    assert _tenants(claimed) == {A: 2, B: 8}


async def test_a_batch_goes_on_to_the_next_priority_once_no_tenant_has_more_at_the_first(db):
    await factories.insert_jobs(db, 1, tenant=A, priority=5)
    lower = await factories.insert_jobs(db, 3, tenant=A, priority=-1)
    await factories.insert_jobs(db, 1, tenant=B, priority=5)

    claimed = await factories.claim(db, limit=10)

    assert _tenants(claimed) == {A: 4, B: 1}
    # The priority-5 jobs in the first statement, the lower ones after them.
    assert {job.job_id for job in claimed[2:]} == {job.job_id for job in lower}


@pytest.mark.parametrize("first", ["waiting for a later time", "past its deadline"])
async def test_a_tenant_whose_first_queued_job_cannot_run_now_still_gets_its_share(db, first):
    # A's first row in the runnable index's order cannot be claimed now: a priority-5 job due in an hour,
    # or the oldest job, past its deadline. A's next job is behind it, and A still shares the batch.
    now = datetime.now(UTC)
    if first == "waiting for a later time":
        (blocked,) = await factories.insert_jobs(db, 1, tenant=A, priority=5, run_after=now + timedelta(hours=1))
    else:
        (blocked,) = await factories.insert_jobs(
            db, 1, tenant=A, run_after=now - timedelta(hours=1), deadline=now - timedelta(seconds=1)
        )
    await factories.insert_jobs(db, 10, tenant=A)
    await factories.insert_jobs(db, 10, tenant=B)

    claimed = await factories.claim(db, limit=4)

    assert _tenants(claimed) == {A: 2, B: 2}
    assert blocked.job_id not in {job.job_id for job in claimed}


async def test_tenants_share_in_proportion_to_their_weights(db, sync_db):
    await factories.insert_jobs(db, 50, tenant=A)
    await factories.insert_jobs(db, 50, tenant=B)
    factories.set_weight(sync_db, A, 3)

    assert _tenants(await factories.claim(db, limit=8)) == {A: 6, B: 2}


def _smallest_shares(running: dict[str, int], weights: dict[str, int], limit: int) -> Counter[str]:
    """The parts of a batch of `limit` when every tenant has more queued than that: the `limit` smallest
    (running + n) / weight, ties to the older head (the tenants' heads are as old as their order here),
    then the tenant."""
    shares = sorted(
        ((running[t] + n) / weights[t], age, t) for age, t in enumerate(running) for n in range(1, limit + 1)
    )
    return Counter(t for _, _, t in shares[:limit])


async def test_the_parts_are_the_smallest_shares_whatever_the_weights_and_the_running_jobs(db, sync_db):
    # The claim generates each tenant's candidates only up to the level no part can pass: the parts must be
    # the ones every candidate would give, for weights far apart and near, and running jobs or none.
    rng = random.Random(20261203)
    for case in range(16):
        kind = f"shares-{case}"
        tenants = [f"shares-{case}-{n}" for n in range(rng.randint(2, 5))]
        limit = rng.choice([1, 7, 20, 50])
        running = {t: rng.choice([0, rng.randint(0, 5), rng.randint(0, 40)]) for t in tenants}
        weights = {t: rng.choice([1, rng.randint(1, 4), rng.randint(1, 10_000)]) for t in tenants}
        for t in tenants:
            factories.set_weight(sync_db, t, weights[t])
            if running[t]:
                await factories.insert_jobs(db, running[t], tenant=TenantId(t), kind=f"{kind}-held")
        if sum(running.values()):
            held = await factories.claim(db, kinds=(f"{kind}-held",), limit=sum(running.values()))
            assert _tenants(held) == {t: n for t, n in running.items() if n}
        for t in tenants:
            await factories.insert_jobs(db, limit, tenant=TenantId(t), kind=kind)

        claimed = await factories.claim(db, kinds=(kind,), limit=limit)

        assert _tenants(claimed) == _smallest_shares(running, weights, limit), (running, weights, limit)


async def test_running_jobs_count_against_a_tenants_share(db):
    await factories.insert_jobs(db, 20, tenant=A)
    await factories.claim(db, limit=5)
    await factories.insert_jobs(db, 20, tenant=B)

    # A already runs 5: B's next five come first.
    assert _tenants(await factories.claim(db, limit=5)) == {B: 5}


async def test_running_jobs_of_every_kind_count_against_a_tenants_share_under_limits(db, sync_db):
    # The running jobs counted with the room under the keys' locks (a claim under limits) are the ones
    # the shares count: every kind's.
    factories.set_limit(sync_db, "kind:echo", max_running=1000)
    factories.set_limit(sync_db, f"tenant:{A}", max_running=1000)
    await factories.insert_jobs(db, 5, tenant=A, kind="sleep")
    await factories.claim(db, kinds=["sleep"], limit=5)
    await factories.insert_jobs(db, 20, tenant=A)
    await factories.insert_jobs(db, 20, tenant=B)

    assert _tenants(await factories.claim(db, limit=5)) == {B: 5}
    assert _tenants(await factories.claim(db, limit=4)) == {A: 2, B: 2}


async def test_priority_orders_before_the_share(db):
    await factories.insert_jobs(db, 10, tenant=A, priority=5)
    await factories.insert_jobs(db, 10, tenant=B)

    assert _tenants(await factories.claim(db, limit=4)) == {A: 4}


async def test_a_paused_kind_is_passed_over_and_its_jobs_wait_visibly(db, sync_db):
    paused = await factories.insert_jobs(db, 50, kind="sleep")
    later = await factories.insert_jobs(db, 3)
    factories.pause_kind(sync_db, "sleep")

    claimed = await factories.claim(db, kinds=("sleep", "echo"), limit=10)

    assert {job.job_id for job in claimed} == {job.job_id for job in later}
    async with db.transaction() as conn:
        why = await scheduling_store.waiting_reason(conn, A, paused[0].job_id)
    assert why == WaitingReason("kind_paused", "kind:sleep")
    assert sync_db.job(paused[0].job_id)["state"] == "pending"
    sync_db.execute("DELETE FROM kind_pauses")
    assert len(await factories.claim(db, kinds=("sleep",), limit=10)) == 10


async def test_a_full_key_is_passed_over_and_never_exceeded(db, sync_db):
    await factories.insert_jobs(db, 30, kind="sleep")
    await factories.insert_jobs(db, 5)
    factories.set_limit(sync_db, "kind:sleep", max_running=2)

    first = await factories.claim(db, kinds=("sleep", "echo"), limit=10)
    second = await factories.claim(db, kinds=("sleep", "echo"), limit=10)

    assert Counter(job.kind for job in first) == {"sleep": 2, "echo": 5}
    assert second == []
    waiting = sync_db.one("SELECT job_id FROM jobs WHERE state = 'pending' LIMIT 1")["job_id"]
    async with db.transaction() as conn:
        why = await scheduling_store.waiting_reason(conn, A, JobId(str(waiting)))
    assert why == WaitingReason("limit_running", "kind:sleep")


async def test_a_key_just_short_of_room_for_every_claim_at_once_is_claimed_up_to_its_room(db, sync_db):
    # Before its key locks a claim judges which keys have room for every claim that could run at once
    # (max_connections of them); those it locks shared and claims only its part of the room. A key just
    # short of that room must be judged short, locked alone, and claimed in full: judged by a count that
    # left out the running jobs, this one was locked shared and a claim of 50 took 49.
    holders = int(sync_db.one("SELECT current_setting('max_connections') AS n")["n"])
    await factories.insert_jobs(db, 70)
    assert len(await factories.claim(db, limit=20)) == 20
    factories.set_limit(sync_db, "kind:echo", max_running=holders * 50 + 10)

    assert len(await factories.claim(db, limit=50)) == 50


def _remember_rooms(conn: psycopg.Connection, rooms: dict[str, int], seconds_ago: float = 0.0) -> None:
    """What the session's last claim would have left: its rooms counted under the locks, with their time."""
    conn.execute(
        "SELECT set_config('jobs.claim_rooms', jsonb_build_object("
        " 'at', extract(epoch FROM clock_timestamp()) - %s, 'rooms', %s::jsonb)::text, false)",
        (seconds_ago, json.dumps(rooms)),
    )


async def test_a_room_remembered_from_the_last_claim_chooses_the_lock_never_what_is_taken(db, database_url, sync_db):
    # The session's last count under the locks judges the next claim's lock mode. One larger than what is
    # left (a limit lowered since) has the key locked shared, and the count after the lock still decides:
    # the claim takes its part of what is left, never the remembered room.
    holders = int(sync_db.one("SELECT current_setting('max_connections') AS n")["n"])
    await factories.insert_jobs(db, 200)
    factories.set_limit(sync_db, "kind:echo", max_running=60)
    params = {"worker_id": "w", "kinds": ["echo"], "limit": 50, "lease_seconds": 60}
    with psycopg.connect(database_url, autocommit=True) as conn:

        def claim() -> int:
            return len(conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall())

        assert claim() == 50
        _remember_rooms(conn, {"kind:echo": holders * 50 + 1000})
        assert claim() == (60 - 50) // holders  # locked shared: a part of the 10 left
        assert claim() == 10  # judged by the count just made: locked alone, and the rest taken
        assert claim() == 0
    assert sync_db.one("SELECT count(*) AS n FROM jobs WHERE state = 'running'")["n"] == 60


async def test_a_room_remembered_more_than_a_second_ago_is_not_judged_by(db, database_url, sync_db):
    holders = int(sync_db.one("SELECT current_setting('max_connections') AS n")["n"])
    await factories.insert_jobs(db, 100)
    factories.set_limit(sync_db, "kind:echo", max_running=40)
    params = {"worker_id": "w", "kinds": ["echo"], "limit": 50, "lease_seconds": 60}
    with psycopg.connect(database_url, autocommit=True) as conn:
        _remember_rooms(conn, {"kind:echo": holders * 50 + 1000}, seconds_ago=5.0)
        assert len(conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall()) == 40  # judged short: locked alone


async def _echo_and_sleep_declaring_a_key_limited_to_3(db, sync_db, *, sleep_jobs: int, echo_jobs: int) -> None:
    factories.declare_kind_keys(sync_db, "echo", ["provider:x"])
    factories.declare_kind_keys(sync_db, "sleep", ["provider:x"])
    await factories.insert_jobs(db, sleep_jobs, kind="sleep")
    await factories.insert_jobs(db, echo_jobs)
    factories.set_limit(sync_db, "provider:x", max_running=3)


async def test_a_key_a_kind_declares_is_shared_by_every_kind_that_declares_it(db, sync_db):
    await _echo_and_sleep_declaring_a_key_limited_to_3(db, sync_db, sleep_jobs=5, echo_jobs=5)

    assert len(await factories.claim(db, kinds=("sleep", "echo"), limit=10)) == 3


async def test_a_claim_of_one_kind_counts_the_other_kinds_running_jobs_that_hold_its_declared_key(db, sync_db):
    await _echo_and_sleep_declaring_a_key_limited_to_3(db, sync_db, sleep_jobs=2, echo_jobs=5)

    assert len(await factories.claim(db, kinds=("sleep",), limit=10)) == 2
    # One kind at one priority (the claim in one pass): the running sleep jobs hold the key beyond their
    # own kind's and tenant's, and count.
    assert len(await factories.claim(db, kinds=("echo",), limit=10)) == 1


async def test_within_a_limited_key_tenants_still_share(db, sync_db):
    await factories.insert_jobs(db, 40, tenant=A)
    await factories.insert_jobs(db, 4, tenant=B)
    factories.set_limit(sync_db, "kind:echo", max_running=4)

    assert _tenants(await factories.claim(db, limit=10)) == {A: 2, B: 2}


async def test_a_tenant_limit_holds_one_tenant_and_not_the_others(db, sync_db):
    await factories.insert_jobs(db, 10, tenant=A)
    await factories.insert_jobs(db, 10, tenant=B)
    factories.set_limit(sync_db, f"tenant:{A}", max_running=1)

    assert _tenants(await factories.claim(db, limit=6)) == {A: 1, B: 5}


async def test_a_rate_limit_starts_a_burst_then_waits_for_tokens(db, sync_db):
    await factories.insert_jobs(db, 10)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=3)

    assert len(await factories.claim(db, limit=10)) == 3
    assert await factories.claim(db, limit=10) == []
    # Refilled by the database clock: a bucket last taken from long ago is full again, never over burst.
    sync_db.execute("UPDATE job_key_state SET refilled_at = clock_timestamp() - interval '1 day'")
    assert len(await factories.claim(db, limit=10)) == 3


async def test_claims_far_from_a_rate_limit_take_one_token_per_job_as_claims_near_it_do(db, sync_db):
    # A batch that cannot empty the bucket is admitted in one statement; one that could is decided job
    # by job. Both take what they claim from the same bucket.
    await factories.insert_jobs(db, 40)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=25)

    assert [len(await factories.claim(db, limit=10)) for _ in range(4)] == [10, 10, 5, 0]
    assert sync_db.one("SELECT floor(tokens) AS left FROM job_key_state WHERE key = 'kind:echo'")["left"] == 0


def _shared_lock_room(sync_db) -> int:
    """The room a key needs for a claim of 50 to lock it shared (0022): 50 for every claim that could run."""
    return int(sync_db.one("SELECT current_setting('max_connections')::integer * 50 AS room")["room"])


def _charges(sync_db, key: str) -> int:
    return int(sync_db.one("SELECT coalesce(sum(taken), 0) AS n FROM job_key_charges WHERE key = %s", (key,))["n"])


async def test_claims_holding_a_rate_key_shared_charge_rows_of_their_own_and_one_locking_it_folds_them(db, sync_db):
    # A bucket with room for five claims of 50 held shared, then none: the sixth locks the key exclusively.
    room = _shared_lock_room(sync_db)
    await factories.insert_jobs(db, 400)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=room + 200)

    for n in range(1, 6):
        assert len(await factories.claim(db, limit=50)) == 50
        assert _charges(sync_db, "kind:echo") == 50 * n  # beside the bucket, which is not written
        assert sync_db.rows("SELECT tokens FROM job_key_state WHERE key = 'kind:echo' AND tokens IS NOT NULL") == []

    assert len(await factories.claim(db, limit=50)) == 50
    assert _charges(sync_db, "kind:echo") == 0
    left = sync_db.one("SELECT floor(tokens) AS left FROM job_key_state WHERE key = 'kind:echo'")["left"]
    assert left == room + 200 - 300


async def test_charges_not_yet_folded_are_taken_from_the_tokens_a_claim_may_use(db, sync_db):
    # As if other claimers had charged all but 10 of a full bucket while holding the key shared.
    room = _shared_lock_room(sync_db)
    jobs = await factories.insert_jobs(db, 60, tenant=A)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=room + 200)
    sync_db.execute("INSERT INTO job_key_charges (key, holder, taken) VALUES ('kind:echo', -1, %s)", (room + 190,))
    async with db.transaction() as conn:
        # Before any claim folds them, what a job waiting for the key is told counts them too.
        assert await scheduling_store.waiting_reason(conn, A, jobs[-1].job_id) is None
        sync_db.execute("UPDATE job_key_charges SET taken = taken + 10")
        assert await scheduling_store.waiting_reason(conn, A, jobs[-1].job_id) == WaitingReason(
            "limit_rate", "kind:echo"
        )
    sync_db.execute("UPDATE job_key_charges SET taken = taken - 10")

    assert len(await factories.claim(db, limit=50)) == 10
    assert await factories.claim(db, limit=50) == []
    assert _charges(sync_db, "kind:echo") == 0  # folded by the claim that locked the key alone


async def test_a_claim_holding_a_rate_key_shared_does_not_wait_for_another_to_commit(db, database_url, sync_db):
    room = _shared_lock_room(sync_db)
    await factories.insert_jobs(db, 100)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=1000.0, burst=room * 4)

    def claim(conn: psycopg.Connection, worker_id: str) -> int:
        params = {"worker_id": worker_id, "kinds": ["echo"], "limit": 50, "lease_seconds": 60}
        return len(conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall())

    with psycopg.connect(database_url) as first, psycopg.connect(database_url) as second:
        assert claim(first, "first") == 50
        # The first claim's transaction is still open, its charge uncommitted: the second does not wait.
        second.execute("SET statement_timeout = '5s'")
        assert claim(second, "second") == 50
        second.commit()
        first.commit()
    assert _charges(sync_db, "kind:echo") == 100


def _tokens_now(sync_db, key: str) -> float:
    """The tokens a claim may take from `key` now: its bucket less the charges not yet folded."""
    return float(
        sync_db.one(
            "SELECT jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, clock_timestamp()) AS t"
            " FROM job_limits AS l LEFT JOIN job_key_state AS s ON s.key = l.key WHERE l.key = %s",
            (key,),
        )["t"]
    )


async def test_folding_a_keys_charges_leaves_the_tokens_a_claim_may_take_as_they_were(db, database_url, sync_db):
    # Three backends claim under the key shared, each charging a row of its own; a key no longer limited
    # keeps charges nothing reads.
    room = _shared_lock_room(sync_db)
    await factories.insert_jobs(db, 30)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=room * 2)
    for n in range(3):
        with psycopg.connect(database_url, autocommit=True) as conn:
            params = {"worker_id": f"w{n}", "kinds": ["echo"], "limit": 10, "lease_seconds": 60}
            assert len(conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall()) == 10
    sync_db.execute("INSERT INTO job_key_charges (key, holder, taken) VALUES ('kind:gone', -1, 7)")
    assert sync_db.one("SELECT count(*) AS n FROM job_key_charges WHERE key = 'kind:echo'")["n"] == 3
    before = _tokens_now(sync_db, "kind:echo")

    async with db.transaction() as conn:
        assert await scheduling_store.charged_keys(conn) == ["kind:echo", "kind:gone"]
    for key, folded in (("kind:echo", 30), ("kind:gone", 7)):
        async with db.transaction() as conn:
            assert await scheduling_store.fold_key_charges(conn, key) == folded

    assert sync_db.rows("SELECT key FROM job_key_charges") == []
    assert _tokens_now(sync_db, "kind:echo") == pytest.approx(before, abs=0.01)
    assert sync_db.one("SELECT tokens FROM job_key_state WHERE key = 'kind:echo'")["tokens"] == pytest.approx(
        room * 2 - 30, abs=0.01
    )
    assert sync_db.rows("SELECT key FROM job_key_state WHERE key = 'kind:gone'") == []


async def test_a_fold_waits_for_the_claims_holding_the_key_shared(db, database_url, sync_db):
    # A charge uncommitted when the fold read the charges would be deleted by it without being subtracted.
    room = _shared_lock_room(sync_db)
    await factories.insert_jobs(db, 20)
    factories.set_limit(sync_db, "kind:echo", rate_per_second=0.001, burst=room * 2)
    params = {"worker_id": "w", "kinds": ["echo"], "limit": 10, "lease_seconds": 60}
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert len(conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall()) == 10
    with psycopg.connect(database_url) as claimer, psycopg.connect(database_url) as folder:
        assert len(claimer.execute(queries.JOB_CLAIM_BATCH, params).fetchall()) == 10
        folder.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            folder.execute(queries.KEY_CHARGES_FOLD, {"key": "kind:echo"})
        folder.rollback()
        claimer.commit()
        assert folder.execute(queries.KEY_CHARGES_FOLD, {"key": "kind:echo"}).fetchone() == (20,)
        folder.commit()
    assert sync_db.one("SELECT tokens FROM job_key_state WHERE key = 'kind:echo'")["tokens"] == pytest.approx(
        room * 2 - 20, abs=0.01
    )


async def test_the_workers_sweep_folds_every_charged_key_as_the_worker_role(db, database_url, sync_db, service_logins):
    room = _shared_lock_room(sync_db)
    await factories.insert_jobs(db, 10, tenant=A)
    await factories.insert_jobs(db, 10, tenant=B)
    for key in ("kind:echo", f"tenant:{A}"):
        factories.set_limit(sync_db, key, rate_per_second=0.001, burst=room * 2)
    assert len(await factories.claim(db, limit=20)) == 20
    assert sync_db.one("SELECT count(DISTINCT key) AS n FROM job_key_charges")["n"] == 2

    worker_url = ServiceLogins.url(database_url, service_logins.worker)
    worker_db = await Database.open(PoolSettings(worker_url, min_size=1, max_size=2), wait=True)
    sweep = asyncio.create_task(fold_key_charges(worker_db, interval_seconds=0.05))
    try:
        await wait_until(
            lambda: not sync_db.rows("SELECT key FROM job_key_charges"), within_seconds=30, what="the charges folded"
        )
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        await worker_db.close()
    tokens = {r["key"]: r["tokens"] for r in sync_db.rows("SELECT key, tokens FROM job_key_state")}
    assert tokens == {
        "kind:echo": pytest.approx(room * 2 - 20, abs=0.01),
        f"tenant:{A}": pytest.approx(room * 2 - 10, abs=0.01),
    }


async def test_a_held_key_waits_until_its_time_for_every_job_that_carries_it(db, sync_db):
    held = await factories.insert_jobs(db, 3, tenant=A)
    await factories.insert_jobs(db, 2, tenant=B, kind="sleep")
    async with db.transaction() as conn:
        until = await scheduling_store.hold_key(conn, f"tenant:{A}", datetime.now(UTC) + timedelta(hours=1))
        # An earlier hold does not shorten the one in force.
        assert await scheduling_store.hold_key(conn, f"tenant:{A}", datetime.now(UTC)) == until
        why = await scheduling_store.waiting_reason(conn, A, held[0].job_id)

    assert why == WaitingReason("key_held", f"tenant:{A}")
    assert _tenants(await factories.claim(db, kinds=("sleep", "echo"), limit=10)) == {B: 2}
    sync_db.execute("UPDATE job_key_state SET held_until = clock_timestamp() - interval '1 second'")
    assert _tenants(await factories.claim(db, kinds=("sleep", "echo"), limit=10)) == {A: 3}


async def test_a_submissions_own_bound_runs_one_job_of_a_document_at_a_time(db, sync_db):
    doc_1 = await factories.insert_jobs(db, 3)
    doc_2 = await factories.insert_jobs(db, 2)
    for job in doc_1:
        factories.add_own_keys(sync_db, job.job_id, [f"tenant:{A}/doc:1"], [1])
    for job in doc_2:
        factories.add_own_keys(sync_db, job.job_id, [f"tenant:{A}/doc:2"], [1])

    first = await factories.claim(db, limit=10)
    assert {job.job_id for job in first} == {doc_1[0].job_id, doc_2[0].job_id}
    assert await factories.claim(db, limit=10) == []

    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(first[0].job_id, first[0].fencing_token, b"")]
        )
    assert [job.job_id for job in await factories.claim(db, limit=10)] == [doc_1[1].job_id]


async def test_own_bounds_hold_while_operators_limits_are_in_force_on_the_kind(db, sync_db):
    # A claim under the kind's limit locks the key first unless a job with keys of its own is queued: one
    # is, so the batch goes to the admission, which runs one job of the document.
    factories.set_limit(sync_db, "kind:echo", max_running=1000)
    plain = await factories.insert_jobs(db, 3)
    doc = await factories.insert_jobs(db, 3)
    for job in doc:
        factories.add_own_keys(sync_db, job.job_id, [f"tenant:{A}/doc:1"], [1])

    claimed = {job.job_id for job in await factories.claim(db, limit=10)}

    assert claimed == {job.job_id for job in plain} | {doc[0].job_id}


async def _stop_by_completion(db, sync_db, job) -> None:
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(job.job_id, job.fencing_token, b"")]
        )


async def _stop_by_failure(db, sync_db, job) -> None:
    async with db.transaction() as conn:
        await lease_store.fail_attempt(
            conn,
            worker_id="w",
            lease=LeaseRef(job.job_id, job.fencing_token),
            error=JobError(ErrorCategory.PERMANENT, "no"),
        )


async def _stop_by_release(db, sync_db, job) -> None:
    async with db.transaction() as conn:
        await lease_store.release(
            conn, worker_id="w", lease=LeaseRef(job.job_id, job.fencing_token), started=True, reason="drain"
        )


async def _stop_by_lease_expiry(db, sync_db, job) -> None:
    await factories.expire_lease(db, job.job_id)
    assert await factories.rescue_expired(db)


async def _stop_by_supersede(db, sync_db, job) -> None:
    await factories.set_state(db, job.job_id, JobState.SUPERSEDED)


@pytest.mark.parametrize(
    "stop",
    [_stop_by_completion, _stop_by_failure, _stop_by_release, _stop_by_lease_expiry, _stop_by_supersede],
    ids=lambda f: f.__name__.removeprefix("_stop_by_"),
)
async def test_every_way_a_job_stops_running_frees_its_slot(db, sync_db, stop):
    await factories.insert_jobs(db, 3)
    factories.set_limit(sync_db, "kind:echo", max_running=1)
    (running,) = await factories.claim(db, limit=10)
    assert await factories.claim(db, limit=10) == []

    await stop(db, sync_db, running)

    assert len(await factories.claim(db, limit=10)) == 1


async def test_one_tenant_with_a_million_rows_does_not_hide_a_hundred_small_ones(db, sync_db):
    # Smaller than the benchmark's million, same shape: the claim reaches every tenant in one pass.
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after)"
        " SELECT 'big', 'echo', 'pending', '', 3, 3, clock_timestamp() - interval '1 hour'"
        " FROM generate_series(1, 20000)"
    )
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)"
        " SELECT 'small-' || t, 'echo', 'pending', '', 3, 3 FROM generate_series(1, 100) AS t, generate_series(1, 3)"
    )
    sync_db.execute("ANALYZE jobs")

    claimed = await factories.claim(db, limit=101)

    assert len(_tenants(claimed)) == 101


async def test_two_tenants_own_keys_of_one_name_are_different_keys(db, sync_db):
    for tenant in (A, B):
        scoped = scope_submission_keys(tenant, ["doc:1@1"])
        for job in await factories.insert_jobs(db, 2, tenant=tenant):
            factories.add_own_keys(sync_db, job.job_id, scoped.keys, scoped.bounds)

    assert _tenants(await factories.claim(db, limit=10)) == {A: 1, B: 1}
