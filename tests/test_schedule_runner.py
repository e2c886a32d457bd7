"""The scheduler loop in process over a real database: a fire repeated after a crash finds its job."""

from __future__ import annotations

import pytest

from api_service.usecases.admission import SubmissionAdmission, TenantLimits
from api_service.usecases.schedule_runner import ScheduleRunner
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from shared.domain.ids import TenantId
from shared.domain.schedules import JobTemplate, NewSchedule, OverlapPolicy, validate_cron
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(30)
TENANT = TenantId("acme")


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
