"""Proto messages to domain types and back, for both services the API serves."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import chain
from operator import attrgetter, itemgetter
from typing import cast

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from jobs.v1 import jobs_pb2, worker_pb2
from shared.domain.checkpoints import Checkpoint, Progress, ProgressReport
from shared.domain.delivery_sets import DeliverySet, FailurePolicy, NewDeliverySet, SetCursor, SetState
from shared.domain.errors import FieldViolation, InvalidArgument
from shared.domain.ids import FencingToken, JobId
from shared.domain.job_logs import AttemptLog, JobLogLine, LogLine, LogPosition
from shared.domain.jobs import (
    ChildJob,
    Completion,
    CompletionBatch,
    Debounce,
    ErrorCategory,
    FailOutcome,
    FailureReport,
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
    PlainBatch,
    ReleaseReport,
    ReportOutcome,
    RetryHint,
)
from shared.domain.schedules import (
    NewSchedule,
    OverlapPolicy,
    Schedule,
    cron_warning,
    template_from_job,
    validate_cron,
)
from shared.domain.trace_context import TraceContext, trace_context_from_headers
from shared.storage.resource_store import Deletion

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


# For the other services' conversion modules.
timestamp_to_proto = _timestamp
datetime_from_proto = _datetime


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
        # Most submissions carry none of these: an empty field is not copied (SubmitJobs of 1,000, per job).
        depends_on=tuple(JobId(d) for d in request.depends_on) if request.depends_on else (),
        labels=dict(request.labels) if request.labels else {},
        dedupe_by_input=request.dedupe_by_input,
        limit_keys=tuple(request.limit_keys) if request.limit_keys else (),
        sequence_key=request.sequence_key or None,
        singleton_key=request.singleton_key or None,
        debounce=_debounce(request),
        trace_context=trace_context,
    )


_SUBMISSION_FIELDS = jobs_pb2.SubmitJobRequest.DESCRIPTOR.fields_by_name
# What a submission of a plain batch may set; a message sets only these, or it takes the general path.
_PLAIN_SCALARS = frozenset(_SUBMISSION_FIELDS[name] for name in ("kind", "payload", "priority", "max_attempts"))
_PLAIN_OTHERS = frozenset(_SUBMISSION_FIELDS[name] for name in ("run_after", "deadline", "labels"))


def plain_batch_from_proto(
    items: Sequence[jobs_pb2.SubmitJobRequest], trace_context: TraceContext | None = None
) -> PlainBatch | None:
    """SubmitJobs' submissions as one PlainBatch, when every one is plain (jobs.py, _is_plain) and its times
    convert; None otherwise, and new_job_from_proto, item by item, takes them (and names a bad time). Read
    with map() rather than a loop: 500 submissions a call."""
    if not items:
        return None
    items = list(items)  # each pass over the repeated field makes a Python object per message again
    given = set(map(_FIELD, chain.from_iterable(map(_LIST_FIELDS, items))))
    others = given - _PLAIN_SCALARS
    if not others <= _PLAIN_OTHERS:
        return None
    count = len(items)
    batch = PlainBatch(
        kinds=list(map(_KIND, items)),
        payloads=list(map(_PAYLOAD, items)),
        priorities=list(map(_PRIORITY, items)),
        max_attempts=list(map(_MAX_ATTEMPTS, items)),
        run_afters=[None] * count,
        deadlines=[None] * count,
        labels=[dict(item.labels) if item.labels else {} for item in items] if others else [{}] * count,
        trace_context=trace_context,
    )
    try:
        for field, column in (("run_after", batch.run_afters), ("deadline", batch.deadlines)):
            if _SUBMISSION_FIELDS[field] in others:
                column[:] = [_datetime(item, field) for item in items]
    except InvalidArgument:
        return None
    return batch


_LIST_FIELDS = jobs_pb2.SubmitJobRequest.ListFields
_FIELD = itemgetter(0)
_KIND, _PAYLOAD, _PRIORITY, _MAX_ATTEMPTS = map(attrgetter, ("kind", "payload", "priority", "max_attempts"))


def _debounce(request: jobs_pb2.SubmitJobRequest) -> Debounce | None:
    if not request.HasField("debounce"):
        return None
    given = request.debounce
    return Debounce(given.key, given.quiet_seconds, given.max_wait_seconds)


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
        sequence_key=job.sequence_key or "",
        singleton_key=job.singleton_key or "",
        debounce_key=job.debounce_key or "",
        parent_job_id=job.parent_job_id or "",
    )
    if job.last_error:
        message.last_error.CopyFrom(job_error_to_proto(job.last_error))
    if job.progress is not None:
        message.progress.CopyFrom(progress_to_proto(job.progress))
    message.checkpoints.extend(checkpoint_to_proto(c) for c in job.checkpoints)
    if job.waiting:
        message.waiting_reason, message.waiting_for_key = job.waiting.reason, job.waiting.key
    return message


def progress_to_proto(progress: Progress) -> jobs_pb2.JobProgress:
    return jobs_pb2.JobProgress(
        fraction=progress.fraction,
        message=progress.message,
        attempt=progress.attempt,
        updated_at=_timestamp(progress.updated_at),
    )


def checkpoint_to_proto(checkpoint: Checkpoint) -> jobs_pb2.StageCheckpoint:
    return jobs_pb2.StageCheckpoint(
        stage=checkpoint.stage,
        data=checkpoint.data,
        attempt=checkpoint.attempt,
        fencing_token=checkpoint.fencing_token,
        recorded_at=_timestamp(checkpoint.at),
    )


def progress_report_from_proto(message: worker_pb2.ProgressReport) -> ProgressReport:
    return ProgressReport(
        LeaseRef(JobId(message.job_id), FencingToken(message.fencing_token)), message.fraction, message.message
    )


def _shipped_lines(lines: Iterable[jobs_pb2.JobLogLine]) -> tuple[tuple[int, LogLine], ...]:
    """Shipped lines with their sequences; a line without a time is taken as logged now."""
    return tuple(
        (
            line.sequence,
            LogLine(
                line.at.ToDatetime(tzinfo=UTC) if line.HasField("at") else datetime.now(UTC),
                line.level,
                line.logger,
                line.message,
            ),
        )
        for line in lines
    )


def attempt_log_from_proto(message: worker_pb2.AttemptLog) -> AttemptLog:
    lease = LeaseRef(JobId(message.job_id), FencingToken(message.fencing_token))
    return AttemptLog(lease, _shipped_lines(message.lines))


def log_line_to_proto(kept: JobLogLine) -> jobs_pb2.JobLogLine:
    return jobs_pb2.JobLogLine(
        attempt=kept.attempt,
        fencing_token=kept.fencing_token,
        sequence=kept.sequence,
        at=_timestamp(kept.line.at),
        level=kept.line.level,
        logger=kept.line.logger,
        message=kept.line.message,
    )


def encode_log_token(after: LogPosition | None) -> str:
    if after is None:
        return ""
    text = f"log:{after.fencing_token}:{after.sequence}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_log_token(token: str) -> LogPosition:
    """The start for an empty token; anything not made by encode_log_token is refused."""
    if not token:
        return LogPosition()
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        prefix, fencing_token, sequence = text.split(":")
        if prefix != "log" or not fencing_token.isdigit() or not sequence.isdigit():
            raise ValueError(text)
        return LogPosition(int(fencing_token), int(sequence))
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(FieldViolation("page_token", "is not a token from a previous page")) from None


def result_to_proto(result: JobResult) -> jobs_pb2.JobResult:
    return jobs_pb2.JobResult(
        job_id=result.job_id,
        payload=result.payload,
        attempt=result.attempt,
        fencing_token=result.fencing_token,
        created_at=_timestamp(result.created_at),
    )


def states_from_proto(numbers: Iterable[jobs_pb2.JobState], prefix: str = "") -> tuple[JobState, ...]:
    states = []
    for index, number in enumerate(numbers):
        if number not in _STATE_FROM_PROTO:
            raise InvalidArgument(FieldViolation(f"{prefix}states[{index}]", "is not a job state"))
        states.append(_STATE_FROM_PROTO[number])
    return tuple(states)


def list_filter_from_proto(request: jobs_pb2.ListJobsRequest) -> ListFilter:
    return ListFilter(
        states=states_from_proto(request.states),
        kind=request.kind or None,
        resource_key=request.resource_key or None,
        labels=dict(request.labels),
        parent_job_id=JobId(request.parent_job_id) if request.parent_job_id else None,
        sequence_key=request.sequence_key or None,
    )


def encode_page_token(cursor: PageCursor | None) -> str:
    if cursor is None:
        return ""
    fields: dict[str, object] = {"c": cursor.created_at.isoformat(), "j": cursor.job_id}
    if cursor.sequence_place is not None:
        fields["s"] = list(cursor.sequence_place)
    raw = json.dumps(fields, separators=(",", ":"))
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
        place = None
        if "s" in raw:
            waiting, position = raw["s"]
            if not isinstance(waiting, bool) or not isinstance(position, int) or isinstance(position, bool):
                raise ValueError("malformed sequence place")
            place = (waiting, position)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidArgument(FieldViolation("page_token", "is not a token from a previous page")) from None
    return PageCursor(created_at, JobId(job_id), place)


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
        resource_deleted=status.resource_deleted,
        outcome=outcome_to_proto(status.outcome),
    )


def completion_batch_from_proto(items: Sequence[worker_pb2.CompleteJobRequest]) -> CompletionBatch | None:
    """The completions as columns, when none carries children (else None: completion_from_proto takes them)."""
    items = list(items)  # as in plain_batch_from_proto
    if any(map(_CHILDREN, items)):
        return None
    # JobId and FencingToken are the str and int they name.
    return CompletionBatch(list(map(_JOB_ID, items)), list(map(_FENCING_TOKEN, items)), list(map(_RESULT, items)))


_CHILDREN, _JOB_ID, _FENCING_TOKEN, _RESULT = map(attrgetter, ("children", "job_id", "fencing_token", "result"))


def completion_from_proto(request: worker_pb2.CompleteJobRequest, prefix: str = "") -> Completion:
    if not request.children:
        return Completion(JobId(request.job_id), FencingToken(request.fencing_token), request.result)
    children = tuple(
        ChildJob(
            JobId(child.job_id),
            new_job_from_proto(
                child.request,
                f"{prefix}children[{i}].request.",
                trace_context_from_headers([("traceparent", child.traceparent), ("tracestate", child.tracestate)]),
            ),
        )
        for i, child in enumerate(request.children)
    )
    return Completion(JobId(request.job_id), FencingToken(request.fencing_token), request.result, children)


def job_error_from_proto(error: jobs_pb2.JobError) -> JobError:
    category = _CATEGORY_FROM_PROTO.get(error.category)
    if category is None:
        raise InvalidArgument(FieldViolation("error.category", "must be retryable, permanent or outcome unknown"))
    return JobError(category, error.message, error.traceback)


def outcome_to_proto(outcome: ReportOutcome) -> worker_pb2.ReportOutcome:
    return _OUTCOME_TO_PROTO[outcome]


def outcomes_to_proto(outcomes: Iterable[ReportOutcome]) -> list[worker_pb2.ReportOutcome]:
    return list(map(_OUTCOME_TO_PROTO.__getitem__, outcomes))


def failure_from_proto(request: worker_pb2.FailJobRequest) -> FailureReport:
    """A pushback needs no category (it is not a failure); any other report does."""
    lease = LeaseRef(JobId(request.job_id), FencingToken(request.fencing_token))
    if request.pushed_back and request.error.category == jobs_pb2.ERROR_CATEGORY_UNSPECIFIED:
        error = JobError(ErrorCategory.RETRYABLE, request.error.message, request.error.traceback)
    else:
        error = job_error_from_proto(request.error)
    hint = None
    if request.pushed_back or request.HasField("retry_after"):
        after = duration_seconds(request.retry_after) if request.HasField("retry_after") else 0.0
        hint = RetryHint(after, request.pushed_back, request.limit_key or None)
    return FailureReport(lease, error, hint)


def release_from_proto(request: worker_pb2.ReleaseJobRequest) -> ReleaseReport:
    lease = LeaseRef(JobId(request.job_id), FencingToken(request.fencing_token))
    return ReleaseReport(lease, request.started, request.reason, _shipped_lines(request.last_lines))


def fail_response_to_proto(outcome: FailOutcome) -> worker_pb2.FailJobResponse:
    return worker_pb2.FailJobResponse(
        state=state_to_proto(outcome.state), next_attempt_at=_timestamp(outcome.next_attempt_at)
    )


def failure_outcome_to_proto(job_id: str, outcome: FailOutcome | ReportOutcome) -> worker_pb2.FailureOutcome:
    if isinstance(outcome, ReportOutcome):
        return worker_pb2.FailureOutcome(job_id=job_id, outcome=outcome_to_proto(outcome))
    return worker_pb2.FailureOutcome(
        job_id=job_id,
        outcome=outcome_to_proto(ReportOutcome.ACCEPTED),
        state=state_to_proto(outcome.state),
        next_attempt_at=_timestamp(outcome.next_attempt_at),
    )


def release_outcome_to_proto(job_id: str, outcome: JobState | ReportOutcome) -> worker_pb2.ReleaseOutcome:
    if isinstance(outcome, ReportOutcome):
        return worker_pb2.ReleaseOutcome(job_id=job_id, outcome=outcome_to_proto(outcome))
    return worker_pb2.ReleaseOutcome(
        job_id=job_id, outcome=outcome_to_proto(ReportOutcome.ACCEPTED), state=state_to_proto(outcome)
    )


_POLICY_TO_PROTO = {
    p: cast(
        jobs_pb2.DeliverySetFailurePolicy,
        jobs_pb2.DeliverySetFailurePolicy.Value(f"DELIVERY_SET_FAILURE_POLICY_{p.name}"),
    )
    for p in FailurePolicy
}
_POLICY_FROM_PROTO = {number: policy for policy, number in _POLICY_TO_PROTO.items()}
_SET_STATE_TO_PROTO = {
    s: cast(jobs_pb2.DeliverySetState, jobs_pb2.DeliverySetState.Value(f"DELIVERY_SET_STATE_{s.name}"))
    for s in SetState
}


def delivery_set_from_proto(
    request: jobs_pb2.SubmitDeliverySetRequest, trace_context: TraceContext | None = None
) -> NewDeliverySet:
    """Unvalidated: the use-case checks names, sizes and every member against the limits."""
    members = tuple(
        (m.name, new_job_from_proto(m.job, f"members[{i}].job.", trace_context)) for i, m in enumerate(request.members)
    )
    fan_in = new_job_from_proto(request.fan_in, "fan_in.", trace_context) if request.HasField("fan_in") else None
    return NewDeliverySet(
        resource_key=request.resource_key,
        resource_version=request.resource_version,
        members=members,
        fan_in=fan_in,
        failure_policy=_POLICY_FROM_PROTO.get(request.failure_policy, FailurePolicy.FAIL_SET),
    )


def delivery_set_to_proto(found: DeliverySet) -> jobs_pb2.DeliverySet:
    return jobs_pb2.DeliverySet(
        set_id=found.set_id,
        resource_key=found.resource_key,
        resource_version=found.resource_version,
        failure_policy=_POLICY_TO_PROTO[found.failure_policy],
        state=_SET_STATE_TO_PROTO[found.state],
        members=[
            jobs_pb2.DeliverySetMemberStatus(
                name=m.name, job=job_to_proto(m.job), result=result_to_proto(m.result) if m.result else None
            )
            for m in found.members
        ],
        fan_in=job_to_proto(found.fan_in) if found.fan_in else None,
        fan_in_result=result_to_proto(found.fan_in_result) if found.fan_in_result else None,
        created_at=_timestamp(found.created_at),
        next_page_token=encode_set_token(found.next_cursor),
    )


def encode_set_token(cursor: SetCursor | None) -> str:
    if cursor is None:
        return ""
    raw = json.dumps({"s": cursor.set_id, "a": cursor.after_name, "r": cursor.with_results}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_set_token(token: str) -> SetCursor | None:
    """An empty token is the first page; anything not produced by encode_set_token is refused."""
    if not token:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        cursor = SetCursor(str(uuid.UUID(raw["s"])), raw["a"], raw["r"])
        if not isinstance(cursor.after_name, str) or not isinstance(cursor.with_results, bool):
            raise TypeError(raw)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidArgument(FieldViolation("page_token", "is not a token from a previous page")) from None
    return cursor


def deletion_to_proto(deletion: Deletion) -> jobs_pb2.DeleteResourceResponse:
    return jobs_pb2.DeleteResourceResponse(
        resource_key=deletion.resource_key,
        deleted_version=deletion.deleted_version,
        cancelled_jobs=len(deletion.cancelled),
        deleted_results=deletion.deleted_results,
        deleted_at=_timestamp(deletion.deleted_at),
    )


_OVERLAP_TO_PROTO = {
    p: cast(jobs_pb2.ScheduleOverlapPolicy, jobs_pb2.ScheduleOverlapPolicy.Value(f"SCHEDULE_OVERLAP_POLICY_{p.name}"))
    for p in OverlapPolicy
}
_OVERLAP_FROM_PROTO = {number: p for p, number in _OVERLAP_TO_PROTO.items()}


def new_schedule_from_proto(request: jobs_pb2.CreateScheduleRequest) -> NewSchedule:
    """Checks the cron expression, the time zone and the template's fields; the use-case checks the rest."""
    overlap = (
        OverlapPolicy.SKIP
        if request.overlap_policy == jobs_pb2.SCHEDULE_OVERLAP_POLICY_UNSPECIFIED
        else _OVERLAP_FROM_PROTO.get(request.overlap_policy)
    )
    if overlap is None:
        raise InvalidArgument(FieldViolation("overlap_policy", "is not a known policy"))
    if not request.HasField("job"):
        raise InvalidArgument(FieldViolation("job", "is required: the job each fire submits"))
    template = template_from_job(new_job_from_proto(request.job, "job."))
    return NewSchedule(
        schedule_id=request.schedule_id,
        template=template,
        spec=validate_cron(request.cron, request.time_zone or "UTC"),
        overlap=overlap,
        catchup_window_seconds=request.catchup_window_seconds,
        paused=request.paused,
        note=request.note,
    )


def schedule_to_proto(schedule: Schedule) -> jobs_pb2.Schedule:
    template = schedule.template
    return jobs_pb2.Schedule(
        schedule_id=schedule.schedule_id,
        job=jobs_pb2.SubmitJobRequest(
            kind=template.kind,
            payload=template.payload,
            priority=template.priority,
            max_attempts=template.max_attempts,
            labels=template.labels,
            limit_keys=list(template.limit_keys),
        ),
        cron=schedule.spec.cron,
        cron_warning=cron_warning(schedule.spec.cron),
        time_zone=schedule.spec.time_zone,
        overlap_policy=_OVERLAP_TO_PROTO[schedule.overlap],
        catchup_window_seconds=schedule.catchup_window_seconds,
        paused=schedule.paused,
        note=schedule.note,
        next_fire_at=_timestamp(schedule.next_fire_at),
        buffered_fire_at=_timestamp(schedule.buffered_fire_at),
        last_fire_at=_timestamp(schedule.last_fire_at),
        last_job_id=schedule.last_job_id or "",
        fires_submitted=schedule.fires_submitted,
        fires_missed=schedule.fires_missed,
        fires_skipped=schedule.fires_skipped,
        last_error=schedule.last_error,
        created_at=_timestamp(schedule.created_at),
    )
