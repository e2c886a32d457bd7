"""The scheduler loop in process over a real database: a fire repeated after a crash finds its job."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from api_service.usecases.admission import SubmissionAdmission, TenantLimits
from api_service.usecases.schedule_runner import ScheduleRunner
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import NotFound
from shared.domain.ids import TenantId
from shared.domain.schedules import JobTemplate, NewSchedule, OverlapPolicy, validate_cron
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.database_roles import ServiceLogins

pytestmark = pytest.mark.timeout(30)
TENANT, OTHER = TenantId("acme"), TenantId("globex")


@pytest.fixture
async def parts(db: Database):
    kinds = await factories.published_kinds(db)
    submissions = SubmissionService(db, kinds, SubmissionLimits())
    admission = SubmissionAdmission(db, TenantLimits())
    return (
        ScheduleService(db, kinds, SubmissionLimits(), submissions, admission),
        ScheduleRunner(db, submissions, admission),
        submissions,
    )


def _new(overlap: OverlapPolicy) -> NewSchedule:
    return NewSchedule("hourly", JobTemplate("echo", b"x"), validate_cron("0 * * * *", "UTC"), overlap, 7200)


@pytest.mark.parametrize("overlap", [OverlapPolicy.ALLOW, OverlapPolicy.SKIP])
async def test_a_fire_whose_job_was_stored_before_a_crash_is_recorded_with_that_job(parts, sync_db, overlap):
    schedules, runner, submissions = parts
    created = await schedules.create(TENANT, "tenant:acme", _new(overlap))
    # An hour back, with a previous job still waiting: the fire at `due` is what a crashed replica
    # submitted before its schedule update rolled back.
    previous = await submissions.submit(TENANT, "t", factories.new_job(kind="echo"))
    sync_db.execute(
        "UPDATE schedules SET next_fire_at = date_trunc('hour', now()) - interval '1 hour', last_job_id = %s",
        (previous.job.job_id,),
    )
    due = sync_db.one("SELECT next_fire_at FROM schedules")["next_fire_at"]
    crashed = await submissions.submit(TENANT, "schedule:hourly", created.template.job_for(created.schedule_uid, due))

    assert await runner.tick()
    fired = await schedules.get(TENANT, "hourly")
    assert fired.last_job_id == crashed.job.job_id and fired.fires_submitted == 1 and fired.fires_skipped == 0
    rows = sync_db.rows("SELECT count(*) AS n FROM jobs WHERE idempotency_key LIKE 'schedule:%%'")
    assert rows == [{"n": 1}]


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    """As the API runs in production: the jobs_api role, which row-level security binds."""
    settings = PoolSettings(ServiceLogins.url(database_url, service_logins.api), max_size=4)
    db = await Database.open(settings, wait=True)
    try:
        yield db
    finally:
        await db.close()


async def test_as_jobs_api_the_runner_fires_every_tenants_schedules_and_tenants_see_only_their_own(db, api_db):
    kinds = await factories.published_kinds(db)  # as a worker would have
    submissions = SubmissionService(api_db, kinds, SubmissionLimits())
    admission = SubmissionAdmission(api_db, TenantLimits())
    schedules = ScheduleService(api_db, kinds, SubmissionLimits(), submissions, admission)
    for tenant in (TENANT, OTHER):
        await schedules.create(tenant, f"tenant:{tenant}", _new(OverlapPolicy.ALLOW))
    async with db.transaction() as conn:
        await conn.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")

    assert await ScheduleRunner(api_db, submissions, admission).tick()
    for tenant in (TENANT, OTHER):
        fired = await schedules.get(tenant, "hourly")
        assert fired.fires_submitted == 1 and fired.last_job_id is not None
    async with api_db.transaction(TENANT) as conn:
        cur = await conn.execute("SELECT tenant FROM schedules UNION ALL SELECT tenant FROM schedule_fires")
        assert {row["tenant"] for row in await cur.fetchall()} == {TENANT}
    await schedules.delete(TENANT, "hourly")
    with pytest.raises(NotFound):
        await schedules.delete(TENANT, "hourly")
    assert (await schedules.get(OTHER, "hourly")).fires_submitted == 1


async def test_fire_records_older_than_the_kept_window_are_pruned_for_every_tenant(db, api_db, sync_db):
    kinds = await factories.published_kinds(db)
    submissions = SubmissionService(api_db, kinds, SubmissionLimits())
    admission = SubmissionAdmission(api_db, TenantLimits())
    schedules = ScheduleService(api_db, kinds, SubmissionLimits(), submissions, admission)
    for tenant in (TENANT, OTHER):
        created = await schedules.create(tenant, f"tenant:{tenant}", _new(OverlapPolicy.ALLOW))
        sync_db.execute(
            "INSERT INTO schedule_fires (schedule_uid, fire_at, tenant, outcome, recorded_at)"
            " SELECT %s, now() - i * interval '1 hour', %s, 'submitted', now() - i * interval '1 hour'"
            " FROM generate_series(1, 30) AS i",
            (created.schedule_uid, tenant),
        )
    runner = ScheduleRunner(api_db, submissions, admission, fires_kept_seconds=10.5 * 3600)

    assert await runner.prune_fires() == 2 * 20
    kept = sync_db.rows("SELECT tenant, count(*) AS n FROM schedule_fires GROUP BY tenant ORDER BY tenant")
    assert kept == [{"tenant": TENANT, "n": 10}, {"tenant": OTHER, "n": 10}]
    assert await runner.prune_fires() == 0
