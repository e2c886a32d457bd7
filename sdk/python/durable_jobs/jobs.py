"""What the client returns: a job as plain, typed values, and how a caller's values become a submission."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from google.protobuf import timestamp_pb2

from durable_jobs._proto.jobs.v1 import jobs_pb2
from durable_jobs.ids import FencingToken, JobId
from durable_jobs.payloads import encode_payload
from durable_jobs.records import ErrorCategory


class JobState(enum.StrEnum):
    """Where a job is in its lifecycle (jobs.v1.JobState without its prefix)."""

    PENDING = "pending"
    BLOCKED = "blocked"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    OUTCOME_UNKNOWN = "outcome_unknown"

    @property
    def is_terminal(self) -> bool:
        """No attempt will start again by itself; OUTCOME_UNKNOWN waits for a person, so it is not."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED)

    @property
    def is_settled(self) -> bool:
        """Nothing more happens without someone acting: terminal, or OUTCOME_UNKNOWN."""
        return self.is_terminal or self is JobState.OUTCOME_UNKNOWN


_STATE_PREFIX = "JOB_STATE_"
_CATEGORY_PREFIX = "ERROR_CATEGORY_"


@dataclass(frozen=True)
class JobError:
    """Why an attempt failed: its category, message and, for an unclassified exception, its traceback."""

    category: ErrorCategory | None
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class Progress:
    """The latest progress a running attempt reported (ctx.report_progress)."""

    fraction: float
    message: str
    attempt: int
    updated_at: datetime | None


@dataclass(frozen=True)
class Job:
    """A job's state as the API answered it. `proto` is the jobs.v1.Job message itself, for the fields
    this class does not carry (checkpoints, for one)."""

    job_id: JobId
    kind: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: datetime | None
    run_after: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: JobError | None
    cancel_requested: bool
    resource_key: str
    resource_version: int
    sequence: int
    priority: int
    deadline: datetime | None
    depends_on: tuple[JobId, ...]
    labels: Mapping[str, str]
    idempotency_key: str
    fencing_token: FencingToken
    progress: Progress | None
    waiting_reason: str
    waiting_for_key: str
    proto: jobs_pb2.Job = field(repr=False, compare=False)
    # The job whose handler spawned this one (ctx.spawn); None for a submitted job.
    parent_job_id: JobId | None = None

    @classmethod
    def from_proto(cls, job: jobs_pb2.Job) -> Job:
        return cls(
            job_id=JobId(job.job_id),
            kind=job.kind,
            state=state_from_proto(job.state),
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            created_at=_time(job, "created_at"),
            run_after=_time(job, "run_after"),
            started_at=_time(job, "started_at"),
            finished_at=_time(job, "finished_at"),
            last_error=error_from_proto(job.last_error) if job.HasField("last_error") else None,
            cancel_requested=job.cancel_requested,
            resource_key=job.resource_key,
            resource_version=job.resource_version,
            sequence=job.sequence,
            priority=job.priority,
            deadline=_time(job, "deadline"),
            depends_on=tuple(JobId(j) for j in job.depends_on),
            labels=dict(job.labels),
            idempotency_key=job.idempotency_key,
            fencing_token=FencingToken(job.fencing_token),
            progress=_progress(job),
            waiting_reason=job.waiting_reason,
            waiting_for_key=job.waiting_for_key,
            proto=job,
            parent_job_id=JobId(job.parent_job_id) if job.parent_job_id else None,
        )


def state_from_proto(state: int) -> JobState:
    name = jobs_pb2.JobState.Name(state)
    return JobState(name.removeprefix(_STATE_PREFIX).lower())


def state_to_proto(state: JobState) -> int:
    return jobs_pb2.JobState.Value(_STATE_PREFIX + state.name)


def error_from_proto(error: jobs_pb2.JobError) -> JobError:
    name = jobs_pb2.ErrorCategory.Name(error.category).removeprefix(_CATEGORY_PREFIX).lower()
    category = ErrorCategory(name) if name in ErrorCategory.__members__.values() else None
    return JobError(category, error.message, error.traceback)


def _time(message: jobs_pb2.Job, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    return stamp.ToDatetime(tzinfo=UTC)


def _progress(job: jobs_pb2.Job) -> Progress | None:
    if not job.HasField("progress"):
        return None
    p = job.progress
    updated = p.updated_at.ToDatetime(tzinfo=UTC) if p.HasField("updated_at") else None
    return Progress(p.fraction, p.message, p.attempt, updated)


@dataclass(frozen=True)
class JobLogLine:
    """A line a handler logged (ctx.log, or a logging record inside the handler), kept with its attempt."""

    attempt: int
    fencing_token: FencingToken
    sequence: int
    at: datetime | None
    level: str
    logger: str
    message: str

    @classmethod
    def from_proto(cls, line: jobs_pb2.JobLogLine) -> JobLogLine:
        at = line.at.ToDatetime(tzinfo=UTC) if line.HasField("at") else None
        return cls(
            line.attempt, FencingToken(line.fencing_token), line.sequence, at, line.level, line.logger, line.message
        )


@dataclass(frozen=True)
class Tls:
    """TLS toward the API: `ca_file` (PEM) to trust instead of the system's roots; `cert_file` and
    `key_file` together for mutual TLS."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("Tls: cert_file and key_file go together")


@dataclass(frozen=True)
class Submission:
    """One job of `submit_many`: the same arguments as `submit`, as a value."""

    kind: str
    payload: object = b""
    idempotency_key: str | None = None
    priority: int = 0
    run_after: datetime | timedelta | None = None
    max_attempts: int = 0
    deadline: datetime | timedelta | None = None
    resource_key: str = ""
    resource_version: int = 0
    depends_on: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    limit_keys: Sequence[str] = ()
    dedupe_by_input: bool = False

    def request(self, now: datetime | None = None) -> jobs_pb2.SubmitJobRequest:
        """The request, with an idempotency key made when none was given (unless the input itself is the
        key, `dedupe_by_input`), so that resubmitting after a lost answer names the same job."""
        key = self.idempotency_key
        if key is None and not self.dedupe_by_input:
            key = f"sdk:{uuid.uuid4()}"
        request = jobs_pb2.SubmitJobRequest(
            kind=self.kind,
            payload=encode_payload(self.payload),
            idempotency_key=key or "",
            priority=self.priority,
            max_attempts=self.max_attempts,
            resource_key=self.resource_key,
            resource_version=self.resource_version,
            depends_on=list(self.depends_on),
            labels=dict(self.labels),
            limit_keys=list(self.limit_keys),
            dedupe_by_input=self.dedupe_by_input,
        )
        now = now or datetime.now(UTC)
        for name, value in (("run_after", self.run_after), ("deadline", self.deadline)):
            if value is not None:
                getattr(request, name).FromDatetime(_absolute(value, now))
        return request


def _absolute(value: datetime | timedelta, now: datetime) -> datetime:
    if isinstance(value, timedelta):
        return now + value
    if value.tzinfo is None:
        raise ValueError("run_after and deadline need an aware datetime (or a timedelta from now)")
    return value


def submissions(items: Iterable[Submission]) -> list[jobs_pb2.SubmitJobRequest]:
    now = datetime.now(UTC)
    return [item.request(now) for item in items]
