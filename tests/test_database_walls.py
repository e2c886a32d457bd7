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
from shared.domain.errors import NotFound
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import Completion, JobState, LeaseRef, ListFilter, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store, queries, receipt_store, retention
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
    async with worker_db.transaction() as conn:
        for table in ("jobs", "job_events", "job_results"):
            cur = await conn.execute(f"DELETE FROM {table}")
            assert cur.rowcount == 0, f"a worker deleted from {table} what belongs to unfinished jobs"
    assert sync_db.snapshot() == before


async def test_the_worker_role_deletes_finished_jobs_after_the_retention_period(db, worker_db, sync_db):
    finished = await _two_tenants_with_everything(db)
    waiting = await factories.insert_job(db)
    sync_db.execute("UPDATE jobs SET finished_at = finished_at - interval '1 hour' WHERE finished_at IS NOT NULL")

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
    unwalled = [t["relname"] for t in tables if not (t["relrowsecurity"] and t["api_policy"])]
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
