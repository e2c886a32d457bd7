import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from jobs.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_OUTCOME_UNSPECIFIED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_ACCEPTED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_LEASE_LOST: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_JOB_CANCELLED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_JOB_SUPERSEDED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_RESOURCE_DELETED: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_RESULT_TOO_LARGE: _ClassVar[ReportOutcome]
    REPORT_OUTCOME_CHILDREN_REFUSED: _ClassVar[ReportOutcome]
REPORT_OUTCOME_UNSPECIFIED: ReportOutcome
REPORT_OUTCOME_ACCEPTED: ReportOutcome
REPORT_OUTCOME_LEASE_LOST: ReportOutcome
REPORT_OUTCOME_JOB_CANCELLED: ReportOutcome
REPORT_OUTCOME_JOB_SUPERSEDED: ReportOutcome
REPORT_OUTCOME_RESOURCE_DELETED: ReportOutcome
REPORT_OUTCOME_RESULT_TOO_LARGE: ReportOutcome
REPORT_OUTCOME_CHILDREN_REFUSED: ReportOutcome

class Lease(_message.Message):
    __slots__ = ("job_id", "fencing_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "leases", "extend_by")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    EXTEND_BY_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    extend_by: _duration_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., extend_by: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LeaseStatus(_message.Message):
    __slots__ = ("job_id", "fencing_token", "held", "cancel_requested", "superseded", "lease_expires_at", "resource_deleted", "outcome")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_DELETED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    held: bool
    cancel_requested: bool
    superseded: bool
    lease_expires_at: _timestamp_pb2.Timestamp
    resource_deleted: bool
    outcome: ReportOutcome
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., held: _Optional[bool] = ..., cancel_requested: _Optional[bool] = ..., superseded: _Optional[bool] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resource_deleted: _Optional[bool] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseStatus]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseStatus, _Mapping]]] = ...) -> None: ...

class CompleteJobRequest(_message.Message):
    __slots__ = ("job_id", "fencing_token", "result", "children")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    result: bytes
    children: _containers.RepeatedCompositeFieldContainer[SpawnedJob]
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., result: _Optional[bytes] = ..., children: _Optional[_Iterable[_Union[SpawnedJob, _Mapping]]] = ...) -> None: ...

class SpawnedJob(_message.Message):
    __slots__ = ("job_id", "request", "traceparent", "tracestate")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    request: _jobs_pb2.SubmitJobRequest
    traceparent: str
    tracestate: str
    def __init__(self, job_id: _Optional[str] = ..., request: _Optional[_Union[_jobs_pb2.SubmitJobRequest, _Mapping]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class CompleteJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _jobs_pb2.JobState
    def __init__(self, state: _Optional[_Union[_jobs_pb2.JobState, str]] = ...) -> None: ...

class CompleteJobsRequest(_message.Message):
    __slots__ = ("completions",)
    COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    completions: _containers.RepeatedCompositeFieldContainer[CompleteJobRequest]
    def __init__(self, completions: _Optional[_Iterable[_Union[CompleteJobRequest, _Mapping]]] = ...) -> None: ...

class CompletionOutcome(_message.Message):
    __slots__ = ("job_id", "outcome")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: ReportOutcome
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ...) -> None: ...

class CompleteJobsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[CompletionOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[CompletionOutcome, _Mapping]]] = ...) -> None: ...

class FailJobRequest(_message.Message):
    __slots__ = ("job_id", "fencing_token", "error", "retry_after", "pushed_back", "limit_key")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    PUSHED_BACK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    error: _jobs_pb2.JobError
    retry_after: _duration_pb2.Duration
    pushed_back: bool
    limit_key: str
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., error: _Optional[_Union[_jobs_pb2.JobError, _Mapping]] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., pushed_back: _Optional[bool] = ..., limit_key: _Optional[str] = ...) -> None: ...

class FailJobResponse(_message.Message):
    __slots__ = ("state", "next_attempt_at")
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    state: _jobs_pb2.JobState
    next_attempt_at: _timestamp_pb2.Timestamp
    def __init__(self, state: _Optional[_Union[_jobs_pb2.JobState, str]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FailJobsRequest(_message.Message):
    __slots__ = ("failures",)
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    failures: _containers.RepeatedCompositeFieldContainer[FailJobRequest]
    def __init__(self, failures: _Optional[_Iterable[_Union[FailJobRequest, _Mapping]]] = ...) -> None: ...

class FailureOutcome(_message.Message):
    __slots__ = ("job_id", "outcome", "state", "next_attempt_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: ReportOutcome
    state: _jobs_pb2.JobState
    next_attempt_at: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ..., state: _Optional[_Union[_jobs_pb2.JobState, str]] = ..., next_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FailJobsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[FailureOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[FailureOutcome, _Mapping]]] = ...) -> None: ...

class ReleaseJobsRequest(_message.Message):
    __slots__ = ("releases",)
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    releases: _containers.RepeatedCompositeFieldContainer[ReleaseJobRequest]
    def __init__(self, releases: _Optional[_Iterable[_Union[ReleaseJobRequest, _Mapping]]] = ...) -> None: ...

class ReleaseOutcome(_message.Message):
    __slots__ = ("job_id", "outcome", "state")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: ReportOutcome
    state: _jobs_pb2.JobState
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ..., state: _Optional[_Union[_jobs_pb2.JobState, str]] = ...) -> None: ...

class ReleaseJobsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[ReleaseOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[ReleaseOutcome, _Mapping]]] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job_id", "fencing_token", "started", "reason", "last_lines")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_LINES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    started: bool
    reason: str
    last_lines: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.JobLogLine]
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., started: _Optional[bool] = ..., reason: _Optional[str] = ..., last_lines: _Optional[_Iterable[_Union[_jobs_pb2.JobLogLine, _Mapping]]] = ...) -> None: ...

class ReleaseJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _jobs_pb2.JobState
    def __init__(self, state: _Optional[_Union[_jobs_pb2.JobState, str]] = ...) -> None: ...

class RecordCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "fencing_token", "stage", "data")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    stage: str
    data: bytes
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., stage: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class RecordCheckpointResponse(_message.Message):
    __slots__ = ("outcome", "checkpoint")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    outcome: ReportOutcome
    checkpoint: _jobs_pb2.StageCheckpoint
    def __init__(self, outcome: _Optional[_Union[ReportOutcome, str]] = ..., checkpoint: _Optional[_Union[_jobs_pb2.StageCheckpoint, _Mapping]] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("job_id", "fencing_token", "fraction", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    fraction: float
    message: str
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., fraction: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class ReportProgressRequest(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[ProgressReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[ProgressReport, _Mapping]]] = ...) -> None: ...

class ProgressOutcome(_message.Message):
    __slots__ = ("job_id", "outcome")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: ReportOutcome
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ...) -> None: ...

class ReportProgressResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[ProgressOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[ProgressOutcome, _Mapping]]] = ...) -> None: ...

class AttemptLog(_message.Message):
    __slots__ = ("job_id", "fencing_token", "lines")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    lines: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.JobLogLine]
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lines: _Optional[_Iterable[_Union[_jobs_pb2.JobLogLine, _Mapping]]] = ...) -> None: ...

class AppendJobLogsRequest(_message.Message):
    __slots__ = ("logs",)
    LOGS_FIELD_NUMBER: _ClassVar[int]
    logs: _containers.RepeatedCompositeFieldContainer[AttemptLog]
    def __init__(self, logs: _Optional[_Iterable[_Union[AttemptLog, _Mapping]]] = ...) -> None: ...

class AppendJobLogsOutcome(_message.Message):
    __slots__ = ("job_id", "outcome")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    outcome: ReportOutcome
    def __init__(self, job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ...) -> None: ...

class AppendJobLogsResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[AppendJobLogsOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[AppendJobLogsOutcome, _Mapping]]] = ...) -> None: ...

class GetDependencyResultsRequest(_message.Message):
    __slots__ = ("job_id", "fencing_token", "after_job_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AFTER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    fencing_token: int
    after_job_id: str
    def __init__(self, job_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., after_job_id: _Optional[str] = ...) -> None: ...

class DependencyResult(_message.Message):
    __slots__ = ("job_id", "payload")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    payload: bytes
    def __init__(self, job_id: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class GetDependencyResultsResponse(_message.Message):
    __slots__ = ("results", "next_after_job_id", "outcome")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_AFTER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DependencyResult]
    next_after_job_id: str
    outcome: ReportOutcome
    def __init__(self, results: _Optional[_Iterable[_Union[DependencyResult, _Mapping]]] = ..., next_after_job_id: _Optional[str] = ..., outcome: _Optional[_Union[ReportOutcome, str]] = ...) -> None: ...
