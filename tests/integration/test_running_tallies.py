"""The running jobs tallied per key (job_running_tallies) over a real database: equal to a count of the
running rows after every way a job starts and stops, after claimers racing on their own connections, and
after the migration that starts them; folded and corrected by the workers' sweep."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest
from psycopg.rows import dict_row

from shared.domain.ids import TenantId
from shared.domain.jobs import Completion, ErrorCategory, JobError, JobState, LeaseRef, RetryHint
from shared.storage import job_store, lease_store, queries, scheduling_store
from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import available_migrations, migrate
from tests import factories
from tests.conditions import wait_until
from tests.database_roles import ServiceLogins
from tests.integration.test_limit_races import _claim_and_complete
from worker_service.background_loops import tend_running_tallies
from worker_service.metrics import WorkerMetrics

pytestmark = pytest.mark.timeout(60)

A, B = TenantId("tenant-a"), TenantId("tenant-b")

# The running rows counted by the keys their claims recorded, independently of how the tallies derive them.
_COUNTED = (
    "SELECT k.key, count(*)::int AS n FROM jobs AS j, unnest(j.running_keys) AS k(key)"
    " WHERE j.state = 'running' GROUP BY k.key"
)
_TALLIED = "SELECT key, sum(running)::int AS n FROM job_running_tallies GROUP BY key HAVING sum(running) <> 0"


def _counted(probe) -> dict[str, int]:
    return {r["key"]: r["n"] for r in probe.rows(_COUNTED)}


def _tallied(probe) -> dict[str, int]:
    return {r["key"]: r["n"] for r in probe.rows(_TALLIED)}


def _assert_tallied_as_counted(sync_db, what: str) -> dict[str, int]:
    counted = _counted(sync_db)
    assert _tallied(sync_db) == counted, what
    return counted


async def test_the_tallies_follow_every_way_a_job_starts_and_stops(db, sync_db):
    factories.declare_kind_keys(sync_db, "echo", ["provider:p"])
    await factories.insert_jobs(db, 8, tenant=A)
    (own,) = await factories.insert_jobs(db, 1, tenant=B)
    factories.add_own_keys(sync_db, own.job_id, [f"tenant:{B}/doc:1"], [1])
    await factories.insert_jobs(db, 3, tenant=B)
    factories.set_limit(sync_db, "kind:echo", max_running=100)
    factories.set_limit(sync_db, f"tenant:{A}", max_running=100, rate_per_second=1000, burst=1000)

    # A job that bounds itself sends the batch to the fair claim; the other claims take the one pass.
    claimed = await factories.claim(db, limit=7)
    assert len(claimed) == 7
    counted = _assert_tallied_as_counted(sync_db, "after the claims")
    assert counted["kind:echo"] == 7 and counted["provider:p"] == 7
    claimed += await factories.claim(db, limit=5)
    counted = _assert_tallied_as_counted(sync_db, "after the second claim")
    assert counted["kind:echo"] == 12 and counted[f"tenant:{B}/doc:1"] == 1

    first, second, third, fourth, fifth, sixth, seventh, eighth, ninth = claimed[:9]
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(first.job_id, first.fencing_token, b"")]
        )
    _assert_tallied_as_counted(sync_db, "after a completion")
    for job, category in ((second, ErrorCategory.RETRYABLE), (third, ErrorCategory.PERMANENT)):
        async with db.transaction() as conn:
            await lease_store.fail_attempt(
                conn, worker_id="w", lease=LeaseRef(job.job_id, job.fencing_token), error=JobError(category, "no")
            )
        _assert_tallied_as_counted(sync_db, f"after a {category.value} failure")
    async with db.transaction() as conn:
        await lease_store.release(
            conn, worker_id="w", lease=LeaseRef(fourth.job_id, fourth.fencing_token), started=True, reason="drain"
        )
    _assert_tallied_as_counted(sync_db, "after a release")
    async with db.transaction() as conn:
        await lease_store.push_back(
            conn,
            worker_id="w",
            lease=LeaseRef(fifth.job_id, fifth.fencing_token),
            hint=RetryHint(after_seconds=0.0, pushed_back=True),
            message="slow down",
            uncounted_max=3,
        )
    _assert_tallied_as_counted(sync_db, "after a pushback")
    await factories.expire_lease(db, sixth.job_id)
    assert await factories.rescue_expired(db)
    _assert_tallied_as_counted(sync_db, "after a lease expired")
    await factories.set_state(db, seventh.job_id, JobState.SUPERSEDED)
    _assert_tallied_as_counted(sync_db, "after a supersession")
    async with db.transaction() as conn:
        assert await job_store.cancel(conn, tenant=TenantId(eighth.tenant), job_id=eighth.job_id, actor="t", reason="x")
    _assert_tallied_as_counted(sync_db, "after a cancellation (a running job is asked to stop)")
    sync_db.execute("DELETE FROM jobs WHERE job_id = %s", (ninth.job_id,))
    _assert_tallied_as_counted(sync_db, "after a running job was deleted")
    async with db.transaction() as conn:
        leases = [LeaseRef(j.job_id, j.fencing_token) for j in claimed[9:]]
        await lease_store.heartbeat(conn, leases, lease_seconds=60)
    _assert_tallied_as_counted(sync_db, "after a heartbeat")

    # What went back to the queue starts again and is tallied again.
    assert await factories.claim(db, limit=20)
    counted = _assert_tallied_as_counted(sync_db, "after the jobs put back were claimed again")
    assert counted["kind:echo"] == len(sync_db.rows("SELECT 1 FROM jobs WHERE state = 'running'"))


async def test_claimers_racing_on_their_own_connections_leave_the_tallies_exact(db, database_url, sync_db):
    await factories.insert_jobs(db, 60, tenant=A)
    await factories.insert_jobs(db, 60, tenant=B)
    factories.set_limit(sync_db, "kind:echo", max_running=5)
    done: set[str] = set()

    await asyncio.gather(*(_claim_and_complete(database_url, f"w{i}", ["echo"], done, 120) for i in range(4)))

    assert _counted(sync_db) == {}
    assert _tallied(sync_db) == {}
    # Each connection kept a row of its own per key; they sum to nothing.
    assert len(sync_db.rows("SELECT DISTINCT holder FROM job_running_tallies")) >= 2


async def test_the_sweep_folds_the_rows_of_exited_backends_and_corrects_a_drifted_tally(
    db, database_url, sync_db, service_logins
):
    await factories.insert_jobs(db, 6, tenant=A)
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row, autocommit=True) as conn:
        async with conn.transaction():
            assert (
                len(await lease_store.claim_batch(conn, worker_id="gone", kinds=["echo"], limit=4, lease_seconds=60))
                == 4
            )
        exited = (await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
    await wait_until(
        lambda: not sync_db.rows("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (exited,)),
        within_seconds=10,
        what="the claiming backend to exit",
    )
    # A change made with the triggers off is not tallied: the sweep finds it.
    sync_db.execute("SET session_replication_role = replica")
    sync_db.execute(
        "UPDATE jobs SET state = 'running', running_keys = ARRAY['kind:echo', 'tenant:' || tenant],"
        " lease_owner = 'hand', lease_expires_at = clock_timestamp() + interval '1 minute'"
        " WHERE job_id = (SELECT job_id FROM jobs WHERE state = 'pending' ORDER BY job_id LIMIT 1)"
    )
    sync_db.execute("SET session_replication_role = origin")

    worker_url = ServiceLogins.url(database_url, service_logins.worker)
    worker_db = await Database.open(PoolSettings(worker_url, min_size=1, max_size=2), wait=True)
    try:
        async with worker_db.transaction() as conn:
            corrected = await scheduling_store.tend_running_tallies(conn)
        async with worker_db.transaction() as conn:
            again = await scheduling_store.tend_running_tallies(conn)
    finally:
        await worker_db.close()

    assert corrected == ["kind:echo", f"tenant:{A}"]
    assert again == []
    assert sync_db.rows("SELECT key, running FROM job_running_tallies WHERE holder = %s", (exited,)) == []
    assert {r["key"]: r["running"] for r in sync_db.rows("SELECT key, running FROM job_running_tallies")} == {
        "kind:echo": 5,
        f"tenant:{A}": 5,
    }
    _assert_tallied_as_counted(sync_db, "after the sweep")


async def test_the_workers_tend_the_tallies_in_the_background_as_the_worker_role(
    db, database_url, sync_db, service_logins
):
    await factories.insert_jobs(db, 3, tenant=A)
    await factories.claim(db, limit=3)
    sync_db.execute("UPDATE job_running_tallies SET running = running + 2 WHERE key = 'kind:echo'")

    worker_url = ServiceLogins.url(database_url, service_logins.worker)
    worker_db = await Database.open(PoolSettings(worker_url, min_size=1, max_size=2), wait=True)
    sweep = asyncio.create_task(tend_running_tallies(worker_db, WorkerMetrics(tenant_limit=5), interval_seconds=0.05))
    try:
        await wait_until(
            lambda: _tallied(sync_db) == _counted(sync_db), within_seconds=30, what="the drifted tally corrected"
        )
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        await worker_db.close()
    assert _tallied(sync_db)["kind:echo"] == 3


async def test_a_truncate_of_jobs_empties_the_tallies(db, sync_db):
    await factories.insert_jobs(db, 3, tenant=A)
    await factories.claim(db, limit=3)
    assert _tallied(sync_db)

    sync_db.execute("TRUNCATE jobs CASCADE")

    assert sync_db.rows("SELECT * FROM job_running_tallies") == []


async def test_the_migration_starts_the_tallies_from_the_running_rows(empty_database_url):
    tallies = next(m for m in available_migrations() if m.name == "running_tallies")
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        conn.execute(queries.MIGRATION_TABLE_CREATE)
        for migration in available_migrations()[: tallies.version - 1]:
            with conn.transaction():
                conn.execute(migration.sql)
                conn.execute(queries.MIGRATION_RECORD, {"version": migration.version, "name": migration.name})
        # Rows as that schema takes them: today's insert statements name columns later migrations add.
        for tenant in (A, B):
            conn.execute(
                "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)"
                " SELECT %s, 'echo', 'pending', '', 3, 3 FROM generate_series(1, 5)",
                (tenant,),
            )
    before = await Database.open(PoolSettings(empty_database_url, min_size=1, max_size=2), wait=True)
    try:
        assert len(await factories.claim(before, limit=7)) == 7
    finally:
        await before.close()

    assert [m.name for m in migrate(empty_database_url).migrations][:1] == ["running_tallies"]

    with psycopg.connect(empty_database_url, row_factory=dict_row) as conn:
        counted = {r["key"]: r["n"] for r in conn.execute(_COUNTED).fetchall()}
        tallied = {r["key"]: r["n"] for r in conn.execute(_TALLIED).fetchall()}
    assert counted["kind:echo"] == 7
    assert tallied == counted
