"""Proto messages to domain types and back, for both services the API serves."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import cast

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from jobs.v1 import jobs_pb2, worker_pb2
from shared.domain.errors import FieldViolation, InvalidArgument
from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import (
    Completion,
    ErrorCategory,
    Job,
    JobError,
    JobEvent,
    JobResult,
    JobState,
    LeaseRef,
    LeaseStatus,
    ListFilter,
    NewJob,
    PageCursor,
    ReportOutcome,
)
from shared.domain.trace_context import TraceContext, trace_context_from_headers

# The generated .pyi types an enum's Value() as int but its fields as the enum class; at run time both
# are the same int, so the table says which it holds.
_STATE_TO_PROTO = {s: cast(jobs_pb2.JobState, jobs_pb2.JobState.Value(f"JOB_STATE_{s.name}")) for s in JobState}
_STATE_FROM_PROTO = {number: state for state, number in _STATE_TO_PROTO.items()}
_CATEGORY_TO_PROTO = {
    c: cast(jobs_pb2.ErrorCategory, jobs_pb2.ErrorCategory.Value(f"ERROR_CATEGORY_{c.name}")) for c in ErrorCategory
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001 - a naive value is UTC, as FromDatetime takes it
_CATEGORY_FROM_PROTO = {number: c for c, number in _CATEGORY_TO_PROTO.items()}
_OUTCOME_TO_PROTO = {
    o: cast(worker_pb2.ReportOutcome, worker_pb2.ReportOutcome.Value(f"REPORT_OUTCOME_{o.name}")) for o in ReportOutcome
}


def _timestamp(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    """As Timestamp.FromDatetime, by integer arithmetic on the offset from the epoch: that method goes
    through a time tuple and took a tenth of the API's time encoding the jobs a batch submission returns."""
    if value is None:
        return None
    since = value - (_EPOCH if value.tzinfo is not None else _NAIVE_EPOCH)
    return timestamp_pb2.Timestamp(seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000)


def _datetime(message: Message, field: str, prefix: str = "") -> datetime | None:
    if not message.HasField(field):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    try:
        return stamp.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument(FieldViolation(f"{prefix}{field}", "is not a valid timestamp")) from None


def duration_seconds(duration: duration_pb2.Duration) -> float:
    """Never raises: a Duration outside timedelta's range is still a number, which the use-case bounds."""
    return duration.seconds + duration.nanos / 1e9


def state_to_proto(state: JobState) -> jobs_pb2.JobState:
    return _STATE_TO_PROTO[state]


def trace_context_from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> TraceContext | None:
    """W3C trace context from the call's metadata, where OpenTelemetry's gRPC instrumentation (or any
    W3C propagator) puts it; malformed headers are ignored (shared/domain/trace_context.py)."""
    return trace_context_from_headers([(key, value) for key, value in metadata or () if isinstance(value, str)])


def new_job_from_proto(
    request: jobs_pb2.SubmitJobRequest, prefix: str = "", trace_context: TraceContext | None = None
) -> NewJob:
    """Unvalidated: the use-case checks every field against the limits."""
    return NewJob(
        kind=request.kind,
        payload=request.payload,
        idempotency_key=request.idempotency_key or None,
        priority=request.priority,
        run_after=_datetime(request, "run_after", prefix),
        max_attempts=request.max_attempts,
        deadline=_datetime(request, "deadline", prefix),
        resource_key=request.resource_key or None,
        resource_version=request.resource_version if request.resource_key else (request.resource_version or None),
        depends_on=tuple(JobId(d) for d in request.depends_on),
        labels=dict(request.labels),
        dedupe_by_input=request.dedupe_by_input,
        trace_context=trace_context,
    )


def job_to_proto(job: Job) -> jobs_pb2.Job:
    message = jobs_pb2.Job(
        job_id=job.job_id,
        kind=job.kind,
        state=_STATE_TO_PROTO[job.state],
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        created_at=_timestamp(job.created_at),
        run_after=_timestamp(job.run_after),
        started_at=_timestamp(job.started_at),
        finished_at=_timestamp(job.finished_at),
        deadline=_timestamp(job.deadline),
        cancel_requested=job.cancel_requested,
        resource_key=job.resource_key or "",
        resource_version=job.resource_version or 0,
        sequence=job.sequence,
        priority=job.priority,
        depends_on=list(job.depends_on),
        labels=job.labels,
        idempotency_key=job.idempotency_key or "",
        fencing_token=job.fencing_token,
    )
    if job.last_error:
        message.last_error.CopyFrom(job_error_to_proto(job.last_error))
    return message


def result_to_proto(result: JobResult) -> jobs_pb2.JobResult:
    return jobs_pb2.JobResult(
        job_id=result.job_id,
        payload=result.payload,
        attempt=result.attempt,
        fencing_token=result.fencing_token,
        created_at=_timestamp(result.created_at),
    )


def list_filter_from_proto(request: jobs_pb2.ListJobsRequest) -> ListFilter:
    states = []
    for index, number in enumerate(request.states):
        if number not in _STATE_FROM_PROTO:
            raise InvalidArgument(FieldViolation(f"states[{index}]", "is not a job state"))
        states.append(_STATE_FROM_PROTO[number])
    return ListFilter(
        states=tuple(states),
        kind=request.kind or None,
        resource_key=request.resource_key or None,
        labels=dict(request.labels),
    )


def encode_page_token(cursor: PageCursor | None) -> str:
    if cursor is None:
        return ""
    raw = json.dumps({"c": cursor.created_at.isoformat(), "j": cursor.job_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str) -> PageCursor | None:
    """An empty token is the first page; anything not produced by encode_page_token is refused."""
    if not token:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        created_at = datetime.fromisoformat(raw["c"])
        job_id = str(uuid.UUID(raw["j"]))
        if created_at.tzinfo is None:
            raise ValueError("naive timestamp")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidArgument(FieldViolation("page_token", "is not a token from a previous page")) from None
    return PageCursor(created_at, JobId(job_id))


def event_to_proto(event: JobEvent) -> jobs_pb2.JobEvent:
    return jobs_pb2.JobEvent(
        job_id=event.job_id,
        sequence=event.sequence,
        from_state=_STATE_TO_PROTO[event.from_state] if event.from_state else jobs_pb2.JOB_STATE_UNSPECIFIED,
        to_state=_STATE_TO_PROTO[event.to_state],
        attempt=event.attempt,
        fencing_token=event.fencing_token,
        actor=event.actor,
        reason=event.reason,
        at=_timestamp(event.at),
        error=job_error_to_proto(event.error) if event.error else None,
    )


def job_error_to_proto(error: JobError) -> jobs_pb2.JobError:
    return jobs_pb2.JobError(
        category=_CATEGORY_TO_PROTO[error.category], message=error.message, traceback=error.traceback
    )


def encode_event_token(after_sequence: int | None) -> str:
    if after_sequence is None:
        return ""
    return base64.urlsafe_b64encode(f"seq:{after_sequence}".encode()).decode().rstrip("=")


def decode_event_token(token: str) -> int:
    """0 (from the start) for an empty token; anything not made by encode_event_token is refused."""
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        prefix, _, number = text.partition(":")
        sequence = int(number)
        if prefix != "seq" or sequence < 0 or not number.isdigit():
            raise ValueError(text)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(FieldViolation("page_token", "is not a token from a previous page")) from None
    return sequence


def leases_from_proto(leases: Iterable[worker_pb2.Lease]) -> list[LeaseRef]:
    return [LeaseRef(JobId(lease.job_id), FencingToken(lease.fencing_token)) for lease in leases]


def lease_status_to_proto(status: LeaseStatus) -> worker_pb2.LeaseStatus:
    return worker_pb2.LeaseStatus(
        job_id=status.job_id,
        fencing_token=status.fencing_token,
        held=status.held,
        cancel_requested=status.cancel_requested,
        superseded=status.superseded,
        lease_expires_at=_timestamp(status.lease_expires_at),
    )


def completion_from_proto(request: worker_pb2.CompleteJobRequest) -> Completion:
    return Completion(JobId(request.job_id), FencingToken(request.fencing_token), request.result)


def job_error_from_proto(error: jobs_pb2.JobError) -> JobError:
    category = _CATEGORY_FROM_PROTO.get(error.category)
    if category is None:
        raise InvalidArgument(FieldViolation("error.category", "must be retryable, permanent or outcome unknown"))
    return JobError(category, error.message, error.traceback)


def outcome_to_proto(outcome: ReportOutcome) -> worker_pb2.ReportOutcome:
    return _OUTCOME_TO_PROTO[outcome]
