"""The admin use-cases over a real PostgreSQL, as the API's own least-privileged role (a member of
jobs_api): bulk actions in batches with the lifecycle's rules, and the tenant walls that keep a
tenant-scoped transaction to its tenant even when an admin query forgets the tenant."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.admin_jobs import AdminJobs
from api_service.usecases.job_queries import JobQueries
from shared.domain.admin import Actor, BulkRequest, JobFilter, LimitSpec
from shared.domain.errors import FailedPrecondition, InvalidArgument
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState
from shared.domain.kinds import KindPolicy
from shared.storage import admin_store, job_store, kind_store
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.database_roles import ServiceLogins

pytestmark = pytest.mark.timeout(120)

ACME, GLOBEX = TenantId("acme"), TenantId("globex")
OPS = Actor("admin:ops")


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    url = ServiceLogins.url(database_url, service_logins.api)
    db = await Database.open(PoolSettings(url, min_size=1, max_size=4, application_name="jobs-tests"), wait=True)
    try:
        yield db
    finally:
        await db.close()


async def test_a_tenant_scoped_transaction_confines_the_admin_search_to_its_tenant(db, api_db) -> None:
    await factories.insert_jobs(db, 3, tenant=ACME)
    await factories.insert_jobs(db, 2, tenant=GLOBEX)
    everything = JobFilter()  # the "bug": a filter that names no tenant
    async with api_db.transaction(ACME) as conn:
        page = await admin_store.search_jobs(conn, everything, None, 100)
        matched = await admin_store.match_jobs(conn, everything, frozenset(JobState), limit=100)
    assert {j.tenant for j in page.jobs} == {ACME} and len(page.jobs) == 3
    assert {tenant for _, tenant in matched} == {ACME}
    async with api_db.transaction() as conn:
        page = await admin_store.search_jobs(conn, everything, None, 100)
    assert {j.tenant for j in page.jobs} == {ACME, GLOBEX}


async def test_a_search_naming_a_tenant_is_walled_by_the_database_as_well_as_the_filter(api_db, db) -> None:
    await factories.insert_jobs(db, 2, tenant=ACME)
    await factories.insert_jobs(db, 2, tenant=GLOBEX)
    jobs = AdminJobs(api_db, JobQueries(api_db))
    page = await jobs.search(JobFilter(tenant=GLOBEX), None, 0)
    assert {j.tenant for j in page.jobs} == {GLOBEX}
    # The transaction itself is the tenant's: a statement without a WHERE clause sees globex only.
    async with api_db.transaction(GLOBEX) as conn:
        cur = await conn.execute("SELECT DISTINCT tenant FROM jobs")
        assert [r["tenant"] for r in await cur.fetchall()] == [GLOBEX]


async def test_bulk_cancel_goes_in_batches_and_skips_what_the_lifecycle_refuses(api_db, db) -> None:
    acme = await factories.insert_jobs(db, 12, tenant=ACME, labels={"b": "x"})
    globex = await factories.insert_jobs(db, 9, tenant=GLOBEX, labels={"b": "x"})
    jobs = AdminJobs(api_db, JobQueries(api_db), batch_size=4)
    request = BulkRequest(JobFilter(labels={"b": "x"}), "bad batch", dry_run=True)
    dry = await jobs.cancel_jobs(OPS, request)
    assert dry.matched == 21

    done = await jobs.cancel_jobs(OPS, BulkRequest(request.filter, "bad batch", dry_run=False, expected_count=21))
    assert (done.matched, done.changed, done.skipped_count) == (21, 21, 0)
    async with api_db.transaction() as conn:
        for job in acme + globex:
            stored = await job_store.get_job(conn, job.tenant, job.job_id)
            assert stored is not None and stored.state is JobState.CANCELLED
        cur = await conn.execute("SELECT count(*) AS n FROM admin_actions WHERE action = 'cancel_jobs'")
        assert (await cur.fetchone())["n"] == 1
        events = await job_store.list_events(conn, GLOBEX, globex[-1].job_id, after_sequence=0, limit=10)
    assert (events[-1].actor, events[-1].reason) == ("admin:ops", "cancelled: bad batch")


async def test_bulk_retry_skips_jobs_the_retry_rule_refuses_and_reopens_the_rest(api_db, db) -> None:
    failed = await factories.insert_jobs(db, 3, tenant=ACME, labels={"b": "y"})
    for job in failed:
        await factories.set_state(db, job.job_id, JobState.FAILED)
    unknown = await factories.insert_job(db, tenant=GLOBEX, labels={"b": "y"})
    await factories.set_state(db, unknown.job_id, JobState.OUTCOME_UNKNOWN)
    jobs = AdminJobs(api_db, JobQueries(api_db), batch_size=2)
    outcome = await jobs.retry_jobs(OPS, BulkRequest(JobFilter(labels={"b": "y"}), "fixed", False, expected_count=4))
    assert (outcome.matched, outcome.changed, outcome.skipped_count) == (4, 3, 1)
    (skip,) = outcome.skipped
    assert (skip.job_id, skip.tenant, skip.reason) == (unknown.job_id, GLOBEX, "DUPLICATE_RISK_NOT_ACCEPTED")


async def test_a_bulk_action_refuses_more_jobs_than_expected_and_changes_none(api_db, db) -> None:
    await factories.insert_jobs(db, 5, tenant=ACME)
    jobs = AdminJobs(api_db, JobQueries(api_db))
    with pytest.raises(FailedPrecondition) as refused:
        await jobs.cancel_jobs(OPS, BulkRequest(JobFilter(), "too many", dry_run=False, expected_count=4))
    assert refused.value.reason == "COUNT_EXCEEDED"
    assert (await jobs.cancel_jobs(OPS, BulkRequest(JobFilter(), "count", dry_run=True))).matched == 5
    fewer = await jobs.cancel_jobs(OPS, BulkRequest(JobFilter(), "more than now", dry_run=False, expected_count=9))
    assert fewer.changed == 5


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (LimitSpec("k", max_running=-1), "max_running"),
        (LimitSpec("k", max_running=1, burst=0), "burst"),
        (LimitSpec("k", rate_per_second=math.inf), "rate_per_second"),
        (LimitSpec("k", rate_per_second=math.nan), "rate_per_second"),
        (LimitSpec("", max_running=1), "key"),
        (LimitSpec("k" * 201, max_running=1), "key"),
    ],
)
async def test_a_bad_limit_names_its_field(api_db, spec: LimitSpec, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await AdminConfig(api_db).set_limit(OPS, spec, "reason")
    assert field in [v.field for v in refused.value.violations]


async def test_list_kinds_shows_publishers_conflicts_and_pauses(api_db, db) -> None:
    now = datetime.now(UTC)
    async with db.transaction() as conn:
        await kind_store.publish(conn, "w1", now, [KindPolicy("variant", max_attempts=2)])
        await kind_store.publish(conn, "w2", now, [KindPolicy("variant", max_attempts=5)])
        await kind_store.publish(conn, "w1", now, [KindPolicy("steady")])
    config = AdminConfig(api_db)
    await config.pause_kind(OPS, "steady", "provider outage")
    kinds = {k.policy.kind: k for k in await config.list_kinds()}
    assert (kinds["variant"].publishers, kinds["variant"].policy_conflict) == (("w1", "w2"), True)
    assert (kinds["steady"].publishers, kinds["steady"].policy_conflict) == (("w1",), False)
    steady = kinds["steady"].pause
    assert steady is not None and (steady.paused_by, steady.reason) == ("admin:ops", "provider outage")
    assert kinds["variant"].pause is None
