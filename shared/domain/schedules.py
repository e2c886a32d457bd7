"""Schedules: cron expressions in a time zone, the job template, and what one fire step decides.

Pure: the clock, the previous fire's job state and the stored schedule come in as values, so every rule
(DST, catch-up, overlap) can be checked without a database."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from shared.domain.errors import FieldViolation, InvalidArgument
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import NewJob

SCHEDULE_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")
CATCHUP_WINDOW_SECONDS_DEFAULT = 60
CRON_CHARS_MAX = 200
NOTE_CHARS_MAX = 1000
CATCHUP_WINDOW_SECONDS_MAX = 366 * 24 * 3600
# Fires missed after downtime are counted one by one up to this many; beyond it the count is a floor
# and the schedule jumps to the first fire inside the window.
MISSED_COUNT_MAX = 100_000
# A cron expression that names only dates that never come (30 February) must not spin for ever.
_CANDIDATES_MAX = 1000
_CRON_FIELDS_ALLOWED = (5, 6)
_HOUR_FIELD = 1


class OverlapPolicy(enum.Enum):
    """What a fire does while the previous fire's job has not reached a terminal state."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"


@dataclass(frozen=True)
class CronSpec:
    """A cron expression (5 fields, or 6 with seconds last) read in an IANA time zone.

    DST: a wall time that a spring-forward skips fires once, at the first moment after the gap; a wall
    time that a fall-back repeats fires once, at its first occurrence, unless the hour field is `*`
    (an hourly or finer schedule fires in both passes of the repeated hour: they are different hours)."""

    cron: str
    time_zone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def next_after(self, after: datetime) -> datetime:
        """The first fire strictly after `after` (aware), in UTC."""
        zone = self.zone
        candidates = croniter(self.cron, after.astimezone(zone))
        every_hour = croniter(self.cron).expanded[_HOUR_FIELD] == ["*"]
        for _ in range(_CANDIDATES_MAX):
            candidate: datetime = candidates.get_next(datetime)
            if every_hour or not _second_pass_of_repeated_hour(candidate, zone):
                return candidate.astimezone(UTC)
        raise InvalidArgument(FieldViolation("cron", "names no time that comes"))


def _second_pass_of_repeated_hour(moment: datetime, zone: ZoneInfo) -> bool:
    wall = moment.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return first != second and moment.utcoffset() == second


def cron_warning(cron: str) -> str:
    """A warning for a six-field expression that reads as written seconds-first (Quartz, Spring), where
    this service takes seconds last: its sixth field, the seconds here, is "*" or a step, which fires
    many times in each matching minute (and is what a seconds-first reader writes for the day of the
    week). Empty when there is nothing to say."""
    fields = cron.split()
    if len(fields) != 6:
        return ""
    seconds = fields[5]
    if seconds not in ("*", "?") and "/" not in seconds:
        return ""
    return (
        f"six fields take seconds LAST here (minute hour day month weekday second): {cron!r} fires at second "
        f"{seconds!r} of every matching minute; for a seconds-first expression (Quartz, Spring), move the first "
        f"field to the end, e.g. {' '.join([*fields[1:], fields[0]])!r}"
    )


def validate_cron(cron: str, time_zone: str, prefix: str = "") -> CronSpec:
    """Raises InvalidArgument naming `cron` or `time_zone`."""
    violations = []
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        violations.append(FieldViolation(f"{prefix}time_zone", "must be an IANA time zone, e.g. Europe/Berlin"))
    fields = cron.split()
    if len(cron) > CRON_CHARS_MAX or len(fields) not in _CRON_FIELDS_ALLOWED or not croniter.is_valid(cron):
        violations.append(
            FieldViolation(
                f"{prefix}cron",
                "must be a cron expression of 5 fields (minute hour day month weekday), or 6 with seconds last",
            )
        )
    if violations:
        raise InvalidArgument(violations)
    spec = CronSpec(cron, time_zone)
    try:
        spec.next_after(datetime.now(UTC))
    except (CroniterError, InvalidArgument):
        raise InvalidArgument(FieldViolation(f"{prefix}cron", "names no time that comes")) from None
    return spec


@dataclass(frozen=True)
class JobTemplate:
    """The SubmitJobRequest fields a recurring job takes; the rest are the fire's (idempotency key) or
    have no meaning for a job submitted again and again (run_after, deadline, versions, dependencies),
    and template_from_job refuses them. Every field of a submission is one or the other."""

    kind: str
    payload: bytes = b""
    priority: int = 0
    max_attempts: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    # As the caller wrote them (`name` or `name@N`); each fire's job is bounded by them like a submission.
    limit_keys: tuple[str, ...] = ()

    def job_for(self, schedule_uid: UUID, fire_at: datetime, *, manual: bool = False) -> NewJob:
        return NewJob(
            kind=self.kind,
            payload=self.payload,
            idempotency_key=fire_idempotency_key(schedule_uid, fire_at, manual=manual),
            priority=self.priority,
            max_attempts=self.max_attempts,
            labels=self.labels,
            limit_keys=self.limit_keys,
        )


def fire_idempotency_key(schedule_uid: UUID, fire_at: datetime, *, manual: bool = False) -> str:
    """Stable for a fire: a scheduler that repeats a fire after a crash meets the job it submitted."""
    stamp = fire_at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"schedule:{schedule_uid}:{'manual:' if manual else ''}{stamp}"


@dataclass(frozen=True)
class NewSchedule:
    schedule_id: str
    template: JobTemplate
    spec: CronSpec
    overlap: OverlapPolicy
    catchup_window_seconds: int
    paused: bool = False
    note: str = ""


@dataclass(frozen=True)
class Schedule:
    tenant: TenantId
    schedule_id: str
    schedule_uid: UUID
    template: JobTemplate
    spec: CronSpec
    overlap: OverlapPolicy
    catchup_window_seconds: int
    paused: bool
    note: str
    next_fire_at: datetime
    buffered_fire_at: datetime | None
    last_fire_at: datetime | None
    last_job_id: JobId | None
    fires_submitted: int
    fires_missed: int
    fires_skipped: int
    last_error: str
    created_at: datetime
    created_by: str


def validate_note(note: str) -> list[FieldViolation]:
    if len(note) > NOTE_CHARS_MAX:
        return [FieldViolation("note", f"must be at most {NOTE_CHARS_MAX} characters")]
    return []


def validate_schedule_fields(schedule_id: str, catchup_window_seconds: int, note: str = "") -> list[FieldViolation]:
    violations = validate_note(note)
    if not SCHEDULE_ID_PATTERN.fullmatch(schedule_id):
        violations.append(FieldViolation("schedule_id", f"must match {SCHEDULE_ID_PATTERN.pattern}"))
    if not 0 <= catchup_window_seconds <= CATCHUP_WINDOW_SECONDS_MAX:
        violations.append(
            FieldViolation(
                "catchup_window_seconds", f"must be between 0 (the default) and {CATCHUP_WINDOW_SECONDS_MAX}"
            )
        )
    return violations


class FireAction(enum.Enum):
    SUBMIT = "submit"
    SKIP = "skip"
    BUFFER = "buffer"
    NOTHING = "nothing"


@dataclass(frozen=True)
class FireStep:
    """What one claim of a due schedule does: at most one submission, then the schedule's new times."""

    action: FireAction
    fire_at: datetime | None
    next_fire_at: datetime
    buffered_fire_at: datetime | None
    missed: int = 0
    last_missed_at: datetime | None = None

    @property
    def progressed(self) -> bool:
        """Whether the step moved the schedule on (a schedule only waiting for its buffer did not)."""
        return self.action is not FireAction.NOTHING or self.missed > 0


def plan_fire_step(schedule: Schedule, now: datetime, previous_running: bool) -> FireStep:
    """One step for a claimed schedule. A buffered fire goes first once the previous job ended; cron
    fires older than the catch-up window are missed (counted, never run); a due fire then follows the
    overlap policy."""
    if schedule.buffered_fire_at is not None and not previous_running:
        return FireStep(FireAction.SUBMIT, schedule.buffered_fire_at, schedule.next_fire_at, None)
    due, missed, last_missed = _skip_missed(schedule, now)
    if due > now:
        return FireStep(FireAction.NOTHING, None, due, schedule.buffered_fire_at, missed, last_missed)
    following = schedule.spec.next_after(due)
    action, buffered = _overlap(schedule, due, previous_running)
    return FireStep(action, due, following, buffered, missed, last_missed)


def _skip_missed(schedule: Schedule, now: datetime) -> tuple[datetime, int, datetime | None]:
    cutoff = now - timedelta(seconds=schedule.catchup_window_seconds)
    due, missed, last_missed = schedule.next_fire_at, 0, None
    while due < cutoff:
        if missed >= MISSED_COUNT_MAX:
            return schedule.spec.next_after(cutoff - timedelta(microseconds=1)), missed, last_missed
        missed, last_missed = missed + 1, due
        due = schedule.spec.next_after(due)
    return due, missed, last_missed


def _overlap(schedule: Schedule, due: datetime, previous_running: bool) -> tuple[FireAction, datetime | None]:
    if not previous_running or schedule.overlap is OverlapPolicy.ALLOW:
        return FireAction.SUBMIT, schedule.buffered_fire_at
    if schedule.overlap is OverlapPolicy.BUFFER_ONE and schedule.buffered_fire_at is None:
        return FireAction.BUFFER, due
    return FireAction.SKIP, schedule.buffered_fire_at


_NOT_IN_TEMPLATE = {
    "idempotency_key": "is derived from each fire (schedule and fire time)",
    "run_after": "is the fire time",
    "deadline": "has no meaning for a job submitted again and again",
    "resource_key": "has no meaning for a job submitted again and again",
    "resource_version": "has no meaning for a job submitted again and again",
    "depends_on": "has no meaning for a job submitted again and again",
    "dedupe_by_input": "cannot be combined with the fire's idempotency key",
    "sequence_key": "is the schedule's overlap policy's to decide (buffer_one runs fires one after another)",
    "singleton_key": "is the schedule's overlap policy's to decide (skip starts none while one runs)",
    "debounce": "cannot collapse fires, each of which has its own time",
}


# Carried into every fire's job as given.
_IN_TEMPLATE = frozenset({"kind", "payload", "priority", "max_attempts", "labels", "limit_keys"})
# Not a request field: a fire has no caller whose trace it continues.
_NOT_A_REQUEST_FIELD = frozenset({"trace_context"})


def _every_submission_field_decided() -> None:
    """A field added to submissions must be carried by templates or refused by them, never dropped."""
    undecided = {f.name for f in fields(NewJob)} - _IN_TEMPLATE - _NOT_IN_TEMPLATE.keys() - _NOT_A_REQUEST_FIELD
    if undecided or _IN_TEMPLATE - {f.name for f in fields(JobTemplate)}:
        raise RuntimeError(f"schedule templates neither carry nor refuse: {sorted(undecided)}")


_every_submission_field_decided()


def template_from_job(job: NewJob, prefix: str = "job.") -> JobTemplate:
    """The template a submission request describes; fields a recurring job cannot set are refused."""
    given = {
        "idempotency_key": job.idempotency_key is not None,
        "run_after": job.run_after is not None,
        "deadline": job.deadline is not None,
        "resource_key": bool(job.resource_key),
        "resource_version": bool(job.resource_version),
        "depends_on": bool(job.depends_on),
        "dedupe_by_input": job.dedupe_by_input,
        "sequence_key": job.sequence_key is not None,
        "singleton_key": job.singleton_key is not None,
        "debounce": job.debounce is not None,
    }
    violations = [
        FieldViolation(f"{prefix}{name}", f"cannot be set in a schedule's job: it {why}")
        for name, why in _NOT_IN_TEMPLATE.items()
        if given[name]
    ]
    if violations:
        raise InvalidArgument(violations)
    return JobTemplate(job.kind, job.payload, job.priority, job.max_attempts, dict(job.labels), job.limit_keys)
