"""Schedules as a tenant manages them: create, read, list, pause, resume, trigger now, delete."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from api_service.usecases.admission import SubmissionAdmission
from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import AlreadyExists, FieldViolation, InvalidArgument, NotFound
from shared.domain.ids import TenantId
from shared.domain.jobs import Job
from shared.domain.paging import fitting, schedule_bytes
from shared.domain.schedules import (
    CATCHUP_WINDOW_SECONDS_DEFAULT,
    NewSchedule,
    Schedule,
    validate_note,
    validate_schedule_fields,
)
from shared.domain.submission_rules import SubmissionLimits, validate_new_job
from shared.storage import schedule_store
from shared.storage.database import Database

LIST_PAGE_SIZE_DEFAULT = 100
LIST_PAGE_SIZE_MAX = 1000


class ScheduleNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("schedule not found")


class ScheduleExists(AlreadyExists):
    reason = "SCHEDULE_EXISTS"


@dataclass(frozen=True)
class SchedulePage:
    schedules: list[Schedule]
    next_after_id: str


class ScheduleService:
    def __init__(
        self,
        db: Database,
        kinds: KindCatalog,
        limits: SubmissionLimits,
        submissions: SubmissionService,
        admission: SubmissionAdmission,
    ) -> None:
        self._db = db
        self._kinds = kinds
        self._limits = limits
        self._submissions = submissions
        self._admission = admission

    async def create(self, tenant: TenantId, actor: str, new: NewSchedule) -> Schedule:
        """Refuses an id the tenant already uses (ALREADY_EXISTS), so a retried create is never two."""
        new = new if new.schedule_id else replace(new, schedule_id=uuid.uuid4().hex)
        violations = validate_schedule_fields(new.schedule_id, new.catchup_window_seconds, new.note)
        if violations:
            raise InvalidArgument(violations)
        if not new.catchup_window_seconds:
            new = replace(new, catchup_window_seconds=CATCHUP_WINDOW_SECONDS_DEFAULT)
        known = await self._kinds.known(new.template.kind)
        sample = new.template.job_for(uuid.uuid4(), _SAMPLE_FIRE_AT)
        validate_new_job(sample, limits=self._limits, known_kinds=known.keys(), prefix="job.")
        async with self._db.transaction(tenant) as conn:
            now = await schedule_store.clock(conn)
            created = await schedule_store.insert(conn, tenant, actor, new, new.spec.next_after(now))
        if created is None:
            raise ScheduleExists(
                f"schedule {new.schedule_id!r} already exists", metadata={"schedule_id": new.schedule_id}
            )
        return created

    async def get(self, tenant: TenantId, schedule_id: str) -> Schedule:
        async with self._db.transaction(tenant) as conn:
            found = await schedule_store.get(conn, tenant, schedule_id)
        if found is None:
            raise ScheduleNotFound()
        return found

    async def list(self, tenant: TenantId, after_id: str, page_size: int) -> SchedulePage:
        if not 0 <= page_size <= LIST_PAGE_SIZE_MAX:
            raise InvalidArgument(FieldViolation("page_size", f"must be between 0 and {LIST_PAGE_SIZE_MAX}"))
        size = page_size or LIST_PAGE_SIZE_DEFAULT
        async with self._db.transaction(tenant) as conn:
            found = await schedule_store.list_page(conn, tenant, after_id, size + 1)
        page = found[: fitting(found[:size], schedule_bytes)]
        return SchedulePage(page, page[-1].schedule_id if len(page) < len(found) else "")

    async def pause(self, tenant: TenantId, schedule_id: str, note: str) -> Schedule:
        """A paused schedule fires no cron time; a fire buffered before the pause is dropped at resume."""
        _check_note(note)
        async with self._db.transaction(tenant) as conn:
            changed = await schedule_store.set_paused(
                conn, tenant, schedule_id, paused=True, note=note, next_fire_at=None
            )
        if changed is None:
            raise ScheduleNotFound()
        return changed

    async def resume(self, tenant: TenantId, schedule_id: str, note: str) -> Schedule:
        """Fires from the next cron time after now: times that passed while paused are not caught up."""
        _check_note(note)
        async with self._db.transaction(tenant) as conn:
            found = await schedule_store.get(conn, tenant, schedule_id, lock=True)
            if found is None:
                raise ScheduleNotFound()
            if not found.paused:
                return found
            now = await schedule_store.clock(conn)
            changed = await schedule_store.set_paused(
                conn, tenant, schedule_id, paused=False, note=note, next_fire_at=found.spec.next_after(now)
            )
        assert changed is not None
        return changed

    async def trigger(self, tenant: TenantId, schedule_id: str) -> tuple[Schedule, Job]:
        """Submits the template now, paused or not and whatever the overlap policy: a person asked for
        it. The cron times stay as they are."""
        async with self._db.transaction(tenant) as conn:
            found = await schedule_store.get(conn, tenant, schedule_id, lock=True)
            if found is None:
                raise ScheduleNotFound()
            fire_at = await schedule_store.clock(conn)
            await self._admission.admit(tenant, 1)
            outcome = await self._submissions.submit(
                tenant, schedule_actor(schedule_id), found.template.job_for(found.schedule_uid, fire_at, manual=True)
            )
            await schedule_store.record_manual_fire(conn, found, fire_at, outcome.job.job_id)
            updated = await schedule_store.get(conn, tenant, schedule_id)
        assert updated is not None
        return updated, outcome.job

    async def delete(self, tenant: TenantId, schedule_id: str) -> None:
        """The jobs it submitted stay; its fire records go."""
        async with self._db.transaction(tenant) as conn:
            deleted = await schedule_store.delete(conn, tenant, schedule_id)
        if not deleted:
            raise ScheduleNotFound()


def _check_note(note: str) -> None:
    violations = validate_note(note)
    if violations:
        raise InvalidArgument(violations)


def schedule_actor(schedule_id: str) -> str:
    """Who a fire's job was submitted by, in its history."""
    return f"schedule:{schedule_id}"


# Any fire time gives a sample job for checking the template: its fields do not depend on it.
_SAMPLE_FIRE_AT = datetime(2000, 1, 1, tzinfo=UTC)
