"""Schedules are fair across tenants, as the claim is: one tenant whose fires its admission refuses (at its
queued-jobs cap, twenty schedules due) does not stop every other tenant's schedules, which the oldest-due
order did until they were counted as missed."""

from __future__ import annotations

import pytest

from api_service.usecases.admission import SubmissionAdmission, TenantLimits
from api_service.usecases.schedule_runner import ScheduleRunner
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from shared.domain.ids import TenantId
from shared.domain.schedules import JobTemplate, NewSchedule, OverlapPolicy, validate_cron
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import schedule_store
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(60)
FULL, OTHER, HEAVY = TenantId("full"), TenantId("other"), TenantId("heavy")
FULL_SCHEDULES = 25


async def _parts(db: Database, limits: TenantLimits) -> tuple[ScheduleService, ScheduleRunner]:
    kinds = await factories.published_kinds(db)
    submissions = SubmissionService(db, kinds, SubmissionLimits())
    admission = SubmissionAdmission(db, limits)
    return ScheduleService(db, kinds, SubmissionLimits(), submissions, admission), ScheduleRunner(
        db, submissions, admission, poll_seconds=0.05
    )


async def _every_minute(schedules: ScheduleService, tenant: TenantId, schedule_id: str) -> None:
    spec = validate_cron("* * * * *", "UTC")
    new = NewSchedule(schedule_id, JobTemplate("echo", b"x"), spec, OverlapPolicy.ALLOW, 3600)
    await schedules.create(tenant, f"tenant:{tenant}", new)


async def test_a_tenant_at_its_cap_does_not_hold_back_other_tenants_schedules(db: Database, sync_db) -> None:
    schedules, runner = await _parts(db, TenantLimits(submit_rate_per_second=0, max_queued_jobs=1))
    await factories.insert_jobs(db, 1, tenant=FULL)  # at its cap: every fire of its is refused for now
    for i in range(FULL_SCHEDULES):
        await _every_minute(schedules, FULL, f"full-{i:02}")
    await _every_minute(schedules, OTHER, "other")
    # The full tenant's fires are the oldest due: the order that once took only them.
    sync_db.execute("UPDATE schedules SET next_fire_at = now() - interval '10 minutes' WHERE tenant = %s", (FULL,))
    sync_db.execute("UPDATE schedules SET next_fire_at = now() - interval '10 seconds' WHERE tenant = %s", (OTHER,))

    assert await runner.tick()

    other = await schedules.get(OTHER, "other")
    assert other.fires_submitted == 1 and other.fires_missed == 0
    full = sync_db.rows("SELECT fires_submitted, fires_missed, last_error FROM schedules WHERE tenant = %s", (FULL,))
    assert all(row == {"fires_submitted": 0, "fires_missed": 0, "last_error": ""} for row in full), (
        "a transient refusal leaves the fire due, neither refused nor missed"
    )
    # The refused tenant is left out of this replica's claims for a while: its refusal cannot have changed.
    async with db.transaction() as conn:
        claimed = await schedule_store.claim_due(conn, deferred_tenants=[FULL])
    # (Another minute may have begun since the tick, making the other tenant's schedule due again.)
    assert [s.tenant for s, _ in claimed if s.tenant == FULL] == []


async def test_due_schedules_are_taken_in_turns_across_tenants_by_weight(db: Database, sync_db) -> None:
    schedules, _ = await _parts(db, TenantLimits(submit_rate_per_second=0, max_queued_jobs=0))
    for i in range(30):
        await _every_minute(schedules, HEAVY, f"heavy-{i:02}")
    for i in range(3):
        await _every_minute(schedules, OTHER, f"other-{i}")
    sync_db.execute("UPDATE schedules SET next_fire_at = now() - interval '10 minutes' WHERE tenant = %s", (HEAVY,))
    sync_db.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute' WHERE tenant = %s", (OTHER,))
    async with db.transaction() as conn:
        equal = [s.tenant for s, _ in await schedule_store.claim_due(conn, limit=4)]
    factories.set_weight(sync_db, OTHER, 2)
    async with db.transaction() as conn:
        weighted = [s.tenant for s, _ in await schedule_store.claim_due(conn, limit=3)]

    assert equal == [HEAVY, OTHER, HEAVY, OTHER]
    assert weighted == [OTHER, HEAVY, OTHER]
