"""Tenant walls and least privilege enforced by PostgreSQL itself, tested as the services' own roles:
LOGIN members of jobs_api and jobs_worker, neither superuser nor owner (both bypass row-level security,
so a test as one of them would prove nothing)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import psycopg.errors
import pytest

from api_service.usecases.job_queries import JobQueries
from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.checkpoints import Checkpoint, ProgressReport
from shared.domain.errors import NotFound
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import Completion, JobState, LeaseRef, ListFilter, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import checkpoint_store, lease_store, queries, receipt_store, retention
from shared.storage.database import Database, PoolSettings, set_tenant
from tests import factories
from tests.database_roles import ServiceLogins
from tests.db_fixtures import SyncProbe

pytestmark = pytest.mark.timeout(60)

ACME, GLOBEX = TenantId("acme"), TenantId("globex")
TENANT_TABLES = ("jobs", "job_results", "job_events", "resource_heads", "job_receipts")


class Rejections:
    def rejected(self, outcome: ReportOutcome) -> None:
        pass


async def _open(url: str) -> Database:
    return await Database.open(PoolSettings(url, min_size=1, max_size=4, application_name="jobs-tests"), wait=True)


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    db = await _open(ServiceLogins.url(database_url, service_logins.api))
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def worker_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    db = await _open(ServiceLogins.url(database_url, service_logins.worker))
    try:
        yield db
    finally:
        await db.close()


async def _two_tenants_with_everything(db: Database) -> dict[TenantId, JobId]:
    """Per tenant: a succeeded job with a result, events, a resource head and a receipt (written as the
    owner, which row-level security does not restrict)."""
    submissions = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    made = {}
    for tenant in (ACME, GLOBEX):
        outcome = await submissions.submit(
            tenant, f"tenant:{tenant}", factories.new_job(resource_key="doc", resource_version=1, labels={"t": tenant})
        )
        claimed = await factories.claim_one(db)
        lease = LeaseRef(claimed.job_id, claimed.fencing_token)
        async with db.transaction() as conn:
            assert await receipt_store.record_intent(conn, lease, "charge", b"intent")
        reports = WorkerReports(db, Rejections(), lease_max_seconds=60)
        await reports.complete("w", Completion(claimed.job_id, claimed.fencing_token, f"result-{tenant}".encode()))
        made[tenant] = outcome.job.job_id
    return made


def test_the_test_logins_are_neither_superusers_nor_owners(sync_db: SyncProbe, service_logins: ServiceLogins):
    for login in (service_logins.api, service_logins.worker):
        role = sync_db.one("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (login,))
        assert role == {"rolsuper": False, "rolbypassrls": False}
        for table in TENANT_TABLES:
            owner = sync_db.one("SELECT tableowner FROM pg_tables WHERE tablename = %s", (table,))["tableowner"]
            assert not sync_db.one("SELECT pg_has_role(%s, %s, 'MEMBER') AS m", (login, owner))["m"], (login, table)


async def test_a_tenant_scoped_transaction_sees_and_changes_only_its_own_rows(db, api_db):
    await _two_tenants_with_everything(db)

    async with api_db.transaction(ACME) as conn:
        for table in TENANT_TABLES:
            # No WHERE clause on purpose: the wall must hold when a statement forgets one.
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
            assert (await cur.fetchone())["n"] >= 1, table
        cur = await conn.execute(
            "SELECT DISTINCT tenant FROM jobs UNION SELECT tenant FROM job_results"
            " UNION SELECT tenant FROM job_events UNION SELECT tenant FROM resource_heads"
        )
        assert [r["tenant"] for r in await cur.fetchall()] == [ACME]
        cur = await conn.execute("UPDATE jobs SET priority = 7")
        assert cur.rowcount == 1
        cur = await conn.execute("UPDATE resource_heads SET latest_version = latest_version")
        assert cur.rowcount == 1

    async with api_db.transaction() as conn:
        cur = await conn.execute("SELECT tenant, priority FROM jobs ORDER BY tenant")
        assert [(r["tenant"], r["priority"]) for r in await cur.fetchall()] == [(ACME, 7), (GLOBEX, 0)]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)"
        " VALUES ('globex', 'echo', 'pending', '', 1, 1)",
        "UPDATE jobs SET tenant = 'globex'",
        "INSERT INTO resource_heads (tenant, resource_key, latest_version) VALUES ('globex', 'other', 1)",
        "INSERT INTO job_events (job_id, tenant, sequence, to_state, attempt, fencing_token, actor, reason)"
        " SELECT job_id, 'globex', 99, 'pending', 0, 0, 'x', 'x' FROM jobs",
    ],
)
async def test_a_tenant_scoped_transaction_cannot_write_another_tenants_rows(db, api_db, sync_db, statement):
    await _two_tenants_with_everything(db)
    before = sync_db.snapshot()

    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        async with api_db.transaction(ACME) as conn:
            await conn.execute(statement)

    assert sync_db.snapshot() == before


async def test_the_tenant_can_be_switched_inside_one_transaction(db, api_db):
    """Group commit runs several tenants' submissions in one transaction, each under its own tenant."""
    await _two_tenants_with_everything(db)
    async with api_db.transaction(ACME) as conn:
        seen = []
        for tenant in (GLOBEX, ACME, GLOBEX):
            await set_tenant(conn, tenant)
            cur = await conn.execute("SELECT tenant FROM jobs")
            seen.append([r["tenant"] for r in await cur.fetchall()])
    assert seen == [[GLOBEX], [ACME], [GLOBEX]]


async def test_the_use_cases_run_as_jobs_api_and_never_cross_the_wall(db, api_db, worker_db):
    await factories.published_kinds(db)  # as a worker would have
    submissions = SubmissionService(api_db, KindCatalog(api_db), SubmissionLimits())
    queries, lifecycle = JobQueries(api_db), JobLifecycle(api_db)
    mine = (await submissions.submit(ACME, "tenant:acme", factories.new_job(idempotency_key="k"))).job
    theirs = (await submissions.submit(GLOBEX, "tenant:globex", factories.new_job(idempotency_key="k"))).job
    assert mine.job_id != theirs.job_id

    claimed = await factories.claim(worker_db, limit=2)
    reports = WorkerReports(api_db, Rejections(), lease_max_seconds=60)
    outcomes = await reports.complete_many(
        "w", [Completion(c.job_id, c.fencing_token, c.payload + b"!") for c in claimed]
    )
    assert outcomes == [ReportOutcome.ACCEPTED] * 2

    assert (await queries.get_result(ACME, mine.job_id)).payload == b"payload!"
    for read in (queries.get_job, queries.get_result):
        with pytest.raises(NotFound):
            await read(GLOBEX, mine.job_id)
    with pytest.raises(NotFound):
        await lifecycle.cancel(GLOBEX, "tenant:globex", mine.job_id, "")
    page = await queries.list_jobs(GLOBEX, ListFilter(), None, 10)
    assert [j.job_id for j in page.jobs] == [theirs.job_id]


async def test_the_worker_role_claims_and_sweeps_but_cannot_publish(db, worker_db, sync_db):
    await factories.insert_jobs(db, 2)
    claimed = await factories.claim(worker_db, limit=2)
    assert len(claimed) == 2 and all(c.payload == b"payload" for c in claimed)
    lease = LeaseRef(claimed[0].job_id, claimed[0].fencing_token)
    async with worker_db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease, "step", b"intent")
        assert await receipt_store.confirm_receipt(conn, lease, "step", b"receipt")
    await factories.expire_lease(db, claimed[1].job_id)
    assert [t.job_id for t in await factories.rescue_expired(worker_db)] == [claimed[1].job_id]
    before = sync_db.snapshot()

    refused = {
        "store a result": "INSERT INTO job_results (job_id, tenant, payload, attempt, fencing_token)"
        " SELECT job_id, tenant, 'forged', attempts, fencing_token FROM jobs",
        "read results": "SELECT * FROM job_results",
        "mark succeeded": "UPDATE jobs SET state = 'succeeded', finished_at = clock_timestamp()",
        "rewrite a payload": "UPDATE jobs SET payload = 'forged'",
        "move a job to another tenant": "UPDATE jobs SET tenant = 'other'",
        "submit a job": "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)"
        " VALUES ('t', 'echo', 'pending', '', 1, 1)",
    }
    for what, statement in refused.items():
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            async with worker_db.transaction() as conn:
                await conn.execute(statement)
        assert sync_db.snapshot() == before, what
    completion = Completion(lease.job_id, FencingToken(lease.fencing_token), b"forged")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with worker_db.transaction() as conn:
            await lease_store.complete_batch(conn, worker_id="w", completions=[completion])
    assert sync_db.snapshot() == before
    assert sync_db.job(lease.job_id)["state"] == JobState.RUNNING
    for table in ("jobs", "job_events", "job_results"):
        # Only jobs_delete_finished deletes, as its owner: the role itself holds no DELETE privilege.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            async with worker_db.transaction() as conn:
                await conn.execute(f"DELETE FROM {table}")
    assert sync_db.snapshot() == before


async def test_the_worker_role_deletes_finished_jobs_after_the_retention_period(db, worker_db, sync_db):
    finished = await _two_tenants_with_everything(db)
    waiting = await factories.insert_job(db)
    sync_db.execute("UPDATE jobs SET finished_at = finished_at - interval '2 hours' WHERE finished_at IS NOT NULL")

    async with worker_db.transaction() as conn:
        deleted = await retention.delete_finished_jobs(conn, retention_seconds=60, limit=10)

    assert deleted == len(finished)
    assert [r["job_id"] for r in sync_db.rows("SELECT job_id::text FROM jobs")] == [waiting.job_id]
    assert sync_db.rows("SELECT * FROM job_results") == []


def test_every_table_with_a_tenant_column_has_row_level_security(sync_db: SyncProbe):
    tables = sync_db.rows(
        "SELECT c.relname, c.relrowsecurity,"
        "       EXISTS (SELECT 1 FROM pg_policy AS p WHERE p.polrelid = c.oid"
        "               AND 'jobs_api'::regrole = ANY (p.polroles)) AS api_policy"
        " FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind = 'r'"
        "   AND (EXISTS (SELECT 1 FROM pg_attribute AS a WHERE a.attrelid = c.oid AND a.attname = 'tenant'"
        "                AND NOT a.attisdropped) OR c.relname = 'job_receipts')"
    )
    assert {t["relname"] for t in tables} >= set(TENANT_TABLES)
    # Operators' settings about a tenant, not the tenant's data: written only through AdminService.
    operator_tables = {"tenant_weights"}
    unwalled = [
        t["relname"]
        for t in tables
        if not (t["relrowsecurity"] and t["api_policy"]) and t["relname"] not in operator_tables
    ]
    assert unwalled == [], "enable row-level security with a jobs_api policy on these (see docs/SECURITY.md)"


def test_the_queued_count_reads_its_own_index_as_jobs_api(sync_db: SyncProbe, database_url, service_logins):
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, finished_at)"
        " SELECT 't' || (i % 50), 'echo', CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'succeeded' END::job_state,"
        "        '', 3, 3, clock_timestamp() FROM generate_series(1, 5000) AS i"
    )
    sync_db.execute("ANALYZE jobs")
    with psycopg.connect(ServiceLogins.url(database_url, service_logins.api)) as conn:
        conn.execute("SELECT set_config('jobs.tenant', 't0', true)")
        rows = conn.execute("EXPLAIN " + queries.JOB_COUNT_QUEUED, {"tenant": "t0", "up_to": 11}).fetchall()
    plan = "\n".join(row[0] for row in rows)
    assert "jobs_tenant_queued_idx" in plan, plan


async def _refused_or_untouched(worker_db: Database, statement: str, params: tuple = ()) -> None:
    """A statement of the worker role is either refused by a policy or finds no row it may change."""
    try:
        async with worker_db.transaction() as conn:
            cur = await conn.execute(statement, params)
            assert cur.rowcount == 0, statement
    except psycopg.errors.InsufficientPrivilege:
        pass


async def test_the_worker_role_cannot_erase_an_unfinished_job(db, worker_db, sync_db):
    """The hostile review's path: stamp a waiting job finished a month ago, then delete it as retention
    would. Each step is refused, and so is a finish stamped honestly followed by a retention of zero."""
    waiting = await factories.insert_job(db)
    running = await factories.insert_and_claim(db, kind="sleep")
    before = sync_db.snapshot()

    for state in ("cancelled", "failed", "succeeded", "superseded"):
        await _refused_or_untouched(
            worker_db,
            f"UPDATE jobs SET state = '{state}', finished_at = clock_timestamp() - interval '30 days'"
            " WHERE job_id = ANY(%s::uuid[])",
            ([waiting.job_id, running.job_id],),
        )
    await _refused_or_untouched(
        worker_db,
        "UPDATE jobs SET state = 'cancelled', finished_at = clock_timestamp() WHERE job_id = %s",
        (waiting.job_id,),
    )
    await _refused_or_untouched(
        worker_db,
        "UPDATE jobs SET finished_at = clock_timestamp() - interval '30 days' WHERE job_id = %s",
        (running.job_id,),
    )
    assert sync_db.snapshot() == before

    # Failing a job with an honest stamp is what a sweep does; the retention floor still keeps it.
    async with worker_db.transaction() as conn:
        await conn.execute(
            "UPDATE jobs SET state = 'failed', finished_at = clock_timestamp() WHERE job_id = %s", (waiting.job_id,)
        )
    async with worker_db.transaction() as conn:
        assert await retention.delete_finished_jobs(conn, retention_seconds=0, limit=10) == 0
    assert {r["job_id"] for r in sync_db.rows("SELECT job_id::text FROM jobs")} == {waiting.job_id, running.job_id}
    assert sync_db.one("SELECT count(*) AS n FROM job_events WHERE job_id = %s", (waiting.job_id,))["n"] >= 2


async def test_the_worker_role_cannot_change_a_finished_job_or_an_unknown_outcome(db, worker_db, sync_db):
    finished = await _two_tenants_with_everything(db)
    unknown = await factories.insert_and_claim(db, kind="sleep")
    await factories.set_state(db, unknown.job_id, JobState.OUTCOME_UNKNOWN, lease_owner=None, lease_expires_at=None)
    before = sync_db.snapshot()

    for assignments in (
        "last_error_message = 'rewritten'",
        "state = 'failed', finished_at = clock_timestamp()",
        "state = 'pending', finished_at = NULL, run_after = clock_timestamp()",
        "finished_at = clock_timestamp() - interval '30 days'",
    ):
        await _refused_or_untouched(
            worker_db,
            f"UPDATE jobs SET {assignments} WHERE job_id = ANY(%s::uuid[])",
            ([*finished.values(), unknown.job_id],),
        )
    assert sync_db.snapshot() == before


async def test_the_worker_role_writes_receipts_and_history_only_for_the_attempt_it_holds(db, worker_db, sync_db):
    old = await factories.insert_and_claim(db)
    async with db.transaction() as conn:
        old_lease = LeaseRef(old.job_id, old.fencing_token)
        assert await receipt_store.record_intent(conn, old_lease, "charge", b"one")
        assert await receipt_store.confirm_receipt(conn, old_lease, "charge", b"ch_1")
    current = await factories.reclaim(db, old.job_id)
    finished = await _two_tenants_with_everything(db)
    before = sync_db.snapshot()

    forged = {
        "rewrite an earlier attempt's receipt": (
            "UPDATE job_receipts SET receipt = 'forged', confirmed_at = clock_timestamp() WHERE attempt = 1",
            (),
        ),
        "a receipt for an attempt it does not hold": (
            "INSERT INTO job_receipts (job_id, attempt, step, fencing_token, intent) VALUES (%s, 1, 'x', 1, '')",
            (current.job_id,),
        ),
        "a receipt for a finished job": (
            "INSERT INTO job_receipts (job_id, attempt, step, fencing_token, intent)"
            " SELECT job_id, attempts, 'x', fencing_token, '' FROM jobs WHERE job_id = %s",
            (finished[ACME],),
        ),
        "an event in a job's history": (
            "INSERT INTO job_events (job_id, tenant, sequence, to_state, attempt, fencing_token, actor, reason)"
            " SELECT job_id, tenant, sequence + 1, 'failed', attempts, fencing_token, 'x', 'forged'"
            " FROM jobs WHERE job_id = %s",
            (current.job_id,),
        ),
    }
    for what, (statement, params) in forged.items():
        await _refused_or_untouched(worker_db, statement, params)
        assert sync_db.snapshot() == before, what

    lease = LeaseRef(current.job_id, current.fencing_token)
    async with worker_db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease, "charge", b"two")
        assert await receipt_store.confirm_receipt(conn, lease, "charge", b"done")
        assert [r.attempt for r in await receipt_store.list_receipts(conn, current.job_id)] == [1, 2]


async def test_every_transition_a_worker_makes_still_works_as_the_worker_role(db, worker_db, sync_db):
    """Claims, each ending of an expired lease, the deadline sweep, and the dependents a failure settles."""
    submissions = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    final = await factories.insert_and_claim(db, max_attempts=1)
    dependent = (
        await submissions.submit(
            factories.TENANT_DEFAULT, factories.ACTOR_DEFAULT, factories.new_job(depends_on=(final.job_id,))
        )
    ).job
    again = await factories.insert_and_claim(db)
    cancelled = await factories.insert_and_claim(db)
    sync_db.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (cancelled.job_id,))
    unknown = await factories.insert_and_claim(db)
    async with worker_db.transaction() as conn:
        assert await receipt_store.record_intent(conn, LeaseRef(unknown.job_id, unknown.fencing_token), "s", b"")
    overdue = await factories.insert_job(db, kind="sleep")
    sync_db.execute("UPDATE jobs SET deadline = clock_timestamp() WHERE job_id = %s", (overdue.job_id,))
    for claimed in (final, again, cancelled, unknown):
        await factories.expire_lease(db, claimed.job_id)

    rescued = await factories.rescue_expired(worker_db)
    async with worker_db.transaction() as conn:
        past_deadline = (await lease_store.fail_past_deadline(conn, limit=10)).moved
    reclaimed = await factories.claim_one(worker_db)

    assert {t.job_id: t.state for t in rescued} == {
        final.job_id: JobState.FAILED,
        again.job_id: JobState.RETRY_WAIT,
        cancelled.job_id: JobState.CANCELLED,
        unknown.job_id: JobState.OUTCOME_UNKNOWN,
    }
    assert [(t.job_id, t.state) for t in past_deadline] == [(overdue.job_id, JobState.FAILED)]
    assert sync_db.job(dependent.job_id)["state"] == "failed"
    assert reclaimed.job_id == again.job_id and reclaimed.attempt == 2


async def test_checkpoints_and_progress_are_walled_and_written_only_through_the_api_role(
    db, api_db, worker_db, sync_db
):
    await factories.published_kinds(db)
    submissions = SubmissionService(api_db, KindCatalog(api_db), SubmissionLimits())
    mine = (await submissions.submit(ACME, "tenant:acme", factories.new_job())).job
    (claimed,) = await factories.claim(worker_db, limit=1)
    lease = LeaseRef(claimed.job_id, claimed.fencing_token)
    reports = WorkerReports(api_db, Rejections(), lease_max_seconds=60)
    assert isinstance(await reports.record_checkpoint("w", lease, "extract", b"uri"), Checkpoint)
    assert await reports.report_progress([ProgressReport(lease, 0.5, "half")]) == [ReportOutcome.ACCEPTED]

    async with worker_db.transaction() as conn:  # what the next claim reads, as the worker role
        assert [c.stage for c in (await checkpoint_store.for_jobs(conn, [mine.job_id]))[mine.job_id]] == ["extract"]
    await _refused_or_untouched(
        worker_db,
        "INSERT INTO job_checkpoints (job_id, tenant, stage, data, attempt, fencing_token)"
        " VALUES (%s::uuid, 'acme', 'forged', '', 1, 1)",
        (mine.job_id,),
    )
    seen = await JobQueries(api_db).get_job(ACME, mine.job_id)
    assert [c.stage for c in seen.checkpoints] == ["extract"] and seen.progress is not None
    async with api_db.transaction(GLOBEX) as conn:
        for table in ("job_checkpoints", "job_progress"):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")  # noqa: S608 - a fixed name
            assert (await cur.fetchone())["n"] == 0, table
