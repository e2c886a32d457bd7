"""The scheduler loop every API replica runs: claims due schedules with FOR UPDATE SKIP LOCKED and
fires them through the same submission use-case as SubmitJob. No leader: replicas share the work row by
row, and a fire repeated after a crash meets the job it submitted (the fire's idempotency key)."""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime

from api_service.metrics import ScheduleMetrics
from api_service.usecases.admission import SubmissionAdmission
from api_service.usecases.schedules import schedule_actor
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import DeadlineExceeded, JobsError, ResourceExhausted, Unavailable
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import TERMINAL_STATES
from shared.domain.schedules import FireAction, FireStep, Schedule, fire_idempotency_key, plan_fire_step
from shared.pause import pause
from shared.storage import job_store, schedule_store
from shared.storage.database import Connection, Database

log = logging.getLogger(__name__)
POLL_SECONDS_DEFAULT = 1.0
# Fire records are history, not state (the job's idempotency key is what makes a fire once): a week of
# them is kept, pruned in batches every few minutes by whichever replica gets there.
FIRES_KEPT_SECONDS_DEFAULT = 7 * 24 * 3600.0
FIRES_PRUNE_INTERVAL_SECONDS = 300.0
FIRES_PRUNE_BATCH = 5000
# A tenant whose admission refused a fire (over its queued-jobs cap or its submission rate) is left out
# of this replica's claims for the refusal's retry-after, at least a poll and at most this long. Its
# fires stay due; the claim's turns across tenants are what keeps the others' schedules firing, and
# this spares re-trying a refusal that cannot have changed.
TENANT_DEFER_MAX_SECONDS = 30.0
_TRANSIENT = (Unavailable, DeadlineExceeded)


class ScheduleRunner:
    def __init__(
        self,
        db: Database,
        submissions: SubmissionService,
        admission: SubmissionAdmission,
        *,
        poll_seconds: float = POLL_SECONDS_DEFAULT,
        fires_kept_seconds: float = FIRES_KEPT_SECONDS_DEFAULT,
        metrics: ScheduleMetrics | None = None,
    ) -> None:
        self._fires_kept_seconds = fires_kept_seconds
        self._pruned_at = float("-inf")
        self._db = db
        self._metrics = metrics or ScheduleMetrics()
        self._submissions = submissions
        self._admission = admission
        self._poll_seconds = poll_seconds
        # Tenant -> the monotonic time until which its fires wait (their admission refused them).
        self._deferred: dict[TenantId, float] = {}

    async def run(self) -> None:
        """Until cancelled. Goes on at once while fires are due (catch-up), else polls."""
        while True:
            try:
                await self._prune_when_due()
                progressed = await self.tick()
            except JobsError as exc:
                log.warning("scheduler: could not fire schedules: %s", exc.message)
                progressed = False
            except Exception:
                # A bug in one step must not end this replica's scheduling for good: the claim rolled
                # back, so the fire is due again at the next poll, and the log says why.
                log.exception("scheduler: a fire step failed")
                progressed = False
            if not progressed:
                await pause(self._poll_seconds)

    async def prune_fires(self) -> int:
        """Deletes the fire records older than the kept window, a batch at a time; how many went."""
        deleted = 0
        while True:
            async with self._db.transaction() as conn:
                batch = await schedule_store.prune_fires(
                    conn, kept_seconds=self._fires_kept_seconds, limit=FIRES_PRUNE_BATCH
                )
            deleted += batch
            if batch < FIRES_PRUNE_BATCH:
                return deleted

    async def _prune_when_due(self) -> None:
        if time.monotonic() - self._pruned_at < FIRES_PRUNE_INTERVAL_SECONDS:
            return
        self._pruned_at = time.monotonic()
        deleted = await self.prune_fires()
        if deleted:
            log.info("scheduler: pruned %d fire records older than %.0fs", deleted, self._fires_kept_seconds)

    async def tick(self) -> bool:
        """One transaction: claims due schedules, in turns across tenants, and takes one fire step each
        (none for a tenant whose admission refused one of them meanwhile). Whether any moved on."""
        progressed = False
        async with self._db.transaction() as conn:
            for schedule, now in await schedule_store.claim_due(conn, deferred_tenants=self._deferred_tenants()):
                if schedule.tenant not in self._deferred:
                    progressed |= await self._step(conn, schedule, now)
        return progressed

    def _deferred_tenants(self) -> list[TenantId]:
        now = time.monotonic()
        self._deferred = {tenant: until for tenant, until in self._deferred.items() if until > now}
        return list(self._deferred)

    def _defer(self, tenant: TenantId, retry_after_seconds: float) -> None:
        wait = min(max(retry_after_seconds, self._poll_seconds), TENANT_DEFER_MAX_SECONDS)
        self._deferred[tenant] = time.monotonic() + wait

    async def _step(self, conn: Connection, schedule: Schedule, now: datetime) -> bool:
        step = plan_fire_step(schedule, now, await _previous_running(conn, schedule))
        if step.action in (FireAction.SKIP, FireAction.BUFFER) and await _already_fired(conn, schedule, step):
            # This fire's job was submitted before a crash undid the schedule's update: it is the fire's.
            step = dataclasses.replace(step, action=FireAction.SUBMIT, buffered_fire_at=schedule.buffered_fire_at)
        if step.missed:
            assert step.last_missed_at is not None
            detail = f"{step.missed} fires up to this one were missed: older than the catch-up window"
            await schedule_store.record_fire(conn, schedule, step.last_missed_at, "missed", detail=detail)
            log.warning("schedule %s: %s", schedule.schedule_id, detail, extra={"tenant": schedule.tenant})
        record = await self._act(conn, schedule, step)
        if record is None:
            return False
        await schedule_store.record_step(conn, schedule, record)
        # Counted before COMMIT: a claim that then fails to commit is fired again and counted twice.
        self._metrics.fired("missed", step.missed)
        if record.outcome:
            self._metrics.fired(record.outcome)
        return step.progressed

    async def _act(self, conn: Connection, schedule: Schedule, step: FireStep) -> schedule_store.StepRecord | None:
        """What the step's action did; None when a transient refusal leaves the fire due for later."""
        if step.action is FireAction.NOTHING:
            return schedule_store.StepRecord(step, None, 0, 0, schedule.last_error, outcome="")
        assert step.fire_at is not None
        if step.action is FireAction.SKIP:
            detail = f"the previous fire's job {schedule.last_job_id} had not ended"
            await schedule_store.record_fire(conn, schedule, step.fire_at, "skipped", detail=detail)
            return schedule_store.StepRecord(step, None, 0, 1, schedule.last_error, outcome="skipped")
        if step.action is FireAction.BUFFER:
            await schedule_store.record_fire(conn, schedule, step.fire_at, "buffered")
            return schedule_store.StepRecord(step, None, 0, 0, schedule.last_error, outcome="buffered")
        try:
            job_id = await self._submit(schedule, step.fire_at)
        except ResourceExhausted as exc:
            self._defer(schedule.tenant, exc.retry_after_seconds)
            log.warning(
                "schedule %s: fire at %s waits, and the tenant's other fires with it: %s",
                schedule.schedule_id,
                step.fire_at,
                exc.message,
                extra={"tenant": schedule.tenant},
            )
            return None
        except _TRANSIENT as exc:
            log.warning("schedule %s: fire at %s waits: %s", schedule.schedule_id, step.fire_at, exc.message)
            return None
        except JobsError as exc:
            await schedule_store.record_fire(conn, schedule, step.fire_at, "refused", detail=exc.message)
            return schedule_store.StepRecord(step, None, 0, 0, exc.message, outcome="refused")
        await schedule_store.record_fire(conn, schedule, step.fire_at, "submitted", job_id=job_id)
        return schedule_store.StepRecord(step, job_id, 1, 0, "", outcome="submitted")

    async def _submit(self, schedule: Schedule, fire_at: datetime) -> JobId:
        """Every rule of SubmitJob applies: the tenant's admission, kinds, limits, idempotency."""
        await self._admission.admit(schedule.tenant, 1)
        outcome = await self._submissions.submit(
            schedule.tenant,
            schedule_actor(schedule.schedule_id),
            schedule.template.job_for(schedule.schedule_uid, fire_at),
        )
        log.info(
            "schedule %s fired for %s",
            schedule.schedule_id,
            fire_at.isoformat(),
            extra={"tenant": schedule.tenant, "job_id": outcome.job.job_id},
        )
        return outcome.job.job_id


async def _previous_running(conn: Connection, schedule: Schedule) -> bool:
    if schedule.last_job_id is None:
        return False
    job = await job_store.get_job(conn, schedule.tenant, schedule.last_job_id)
    return job is not None and job.state not in TERMINAL_STATES


async def _already_fired(conn: Connection, schedule: Schedule, step: FireStep) -> bool:
    assert step.fire_at is not None
    key = fire_idempotency_key(schedule.schedule_uid, step.fire_at)
    return await job_store.get_by_idempotency_key(conn, schedule.tenant, key) is not None
