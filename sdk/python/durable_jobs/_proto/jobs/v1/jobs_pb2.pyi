import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_BLOCKED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_RETRY_WAIT: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_SUPERSEDED: _ClassVar[JobState]
    JOB_STATE_OUTCOME_UNKNOWN: _ClassVar[JobState]

class ErrorCategory(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CATEGORY_UNSPECIFIED: _ClassVar[ErrorCategory]
    ERROR_CATEGORY_RETRYABLE: _ClassVar[ErrorCategory]
    ERROR_CATEGORY_PERMANENT: _ClassVar[ErrorCategory]
    ERROR_CATEGORY_OUTCOME_UNKNOWN: _ClassVar[ErrorCategory]

class DeliverySetFailurePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_SET_FAILURE_POLICY_UNSPECIFIED: _ClassVar[DeliverySetFailurePolicy]
    DELIVERY_SET_FAILURE_POLICY_FAIL_SET: _ClassVar[DeliverySetFailurePolicy]
    DELIVERY_SET_FAILURE_POLICY_WAIT_FOR_MANUAL_RETRY: _ClassVar[DeliverySetFailurePolicy]

class DeliverySetState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_SET_STATE_UNSPECIFIED: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_IN_PROGRESS: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_COMPLETE: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_FAILED: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_WAITING_FOR_RETRY: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_SUPERSEDED: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_DELETED: _ClassVar[DeliverySetState]
    DELIVERY_SET_STATE_EXPIRED: _ClassVar[DeliverySetState]

class ScheduleOverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_OVERLAP_POLICY_UNSPECIFIED: _ClassVar[ScheduleOverlapPolicy]
    SCHEDULE_OVERLAP_POLICY_SKIP: _ClassVar[ScheduleOverlapPolicy]
    SCHEDULE_OVERLAP_POLICY_BUFFER_ONE: _ClassVar[ScheduleOverlapPolicy]
    SCHEDULE_OVERLAP_POLICY_ALLOW: _ClassVar[ScheduleOverlapPolicy]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_BLOCKED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_RETRY_WAIT: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_SUPERSEDED: JobState
JOB_STATE_OUTCOME_UNKNOWN: JobState
ERROR_CATEGORY_UNSPECIFIED: ErrorCategory
ERROR_CATEGORY_RETRYABLE: ErrorCategory
ERROR_CATEGORY_PERMANENT: ErrorCategory
ERROR_CATEGORY_OUTCOME_UNKNOWN: ErrorCategory
DELIVERY_SET_FAILURE_POLICY_UNSPECIFIED: DeliverySetFailurePolicy
DELIVERY_SET_FAILURE_POLICY_FAIL_SET: DeliverySetFailurePolicy
DELIVERY_SET_FAILURE_POLICY_WAIT_FOR_MANUAL_RETRY: DeliverySetFailurePolicy
DELIVERY_SET_STATE_UNSPECIFIED: DeliverySetState
DELIVERY_SET_STATE_IN_PROGRESS: DeliverySetState
DELIVERY_SET_STATE_COMPLETE: DeliverySetState
DELIVERY_SET_STATE_FAILED: DeliverySetState
DELIVERY_SET_STATE_WAITING_FOR_RETRY: DeliverySetState
DELIVERY_SET_STATE_SUPERSEDED: DeliverySetState
DELIVERY_SET_STATE_DELETED: DeliverySetState
DELIVERY_SET_STATE_EXPIRED: DeliverySetState
SCHEDULE_OVERLAP_POLICY_UNSPECIFIED: ScheduleOverlapPolicy
SCHEDULE_OVERLAP_POLICY_SKIP: ScheduleOverlapPolicy
SCHEDULE_OVERLAP_POLICY_BUFFER_ONE: ScheduleOverlapPolicy
SCHEDULE_OVERLAP_POLICY_ALLOW: ScheduleOverlapPolicy

class JobError(_message.Message):
    __slots__ = ("category", "message", "traceback")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    category: ErrorCategory
    message: str
    traceback: str
    def __init__(self, category: _Optional[_Union[ErrorCategory, str]] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "kind", "state", "attempts", "max_attempts", "created_at", "run_after", "started_at", "finished_at", "last_error", "cancel_requested", "resource_key", "resource_version", "sequence", "priority", "deadline", "depends_on", "labels", "idempotency_key", "fencing_token", "progress", "checkpoints", "waiting_reason", "waiting_for_key", "sequence_key", "singleton_key", "debounce_key", "parent_job_id")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RUN_AFTER_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_KEY_FIELD_NUMBER: _ClassVar[int]
    SINGLETON_KEY_FIELD_NUMBER: _ClassVar[int]
    DEBOUNCE_KEY_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kind: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: _timestamp_pb2.Timestamp
    run_after: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    last_error: JobError
    cancel_requested: bool
    resource_key: str
    resource_version: int
    sequence: int
    priority: int
    deadline: _timestamp_pb2.Timestamp
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    idempotency_key: str
    fencing_token: int
    progress: JobProgress
    checkpoints: _containers.RepeatedCompositeFieldContainer[StageCheckpoint]
    waiting_reason: str
    waiting_for_key: str
    sequence_key: str
    singleton_key: str
    debounce_key: str
    parent_job_id: str
    def __init__(self, job_id: _Optional[str] = ..., kind: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[_Union[JobError, _Mapping]] = ..., cancel_requested: _Optional[bool] = ..., resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., sequence: _Optional[int] = ..., priority: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., depends_on: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., fencing_token: _Optional[int] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., checkpoints: _Optional[_Iterable[_Union[StageCheckpoint, _Mapping]]] = ..., waiting_reason: _Optional[str] = ..., waiting_for_key: _Optional[str] = ..., sequence_key: _Optional[str] = ..., singleton_key: _Optional[str] = ..., debounce_key: _Optional[str] = ..., parent_job_id: _Optional[str] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ("fraction", "message", "attempt", "updated_at")
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    fraction: float
    message: str
    attempt: int
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, fraction: _Optional[float] = ..., message: _Optional[str] = ..., attempt: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StageCheckpoint(_message.Message):
    __slots__ = ("stage", "data", "attempt", "fencing_token", "recorded_at")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    stage: str
    data: bytes
    attempt: int
    fencing_token: int
    recorded_at: _timestamp_pb2.Timestamp
    def __init__(self, stage: _Optional[str] = ..., data: _Optional[bytes] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., recorded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("kind", "payload", "idempotency_key", "priority", "run_after", "max_attempts", "deadline", "resource_key", "resource_version", "depends_on", "labels", "dedupe_by_input", "limit_keys", "sequence_key", "singleton_key", "debounce")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RUN_AFTER_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_BY_INPUT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEYS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_KEY_FIELD_NUMBER: _ClassVar[int]
    SINGLETON_KEY_FIELD_NUMBER: _ClassVar[int]
    DEBOUNCE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    payload: bytes
    idempotency_key: str
    priority: int
    run_after: _timestamp_pb2.Timestamp
    max_attempts: int
    deadline: _timestamp_pb2.Timestamp
    resource_key: str
    resource_version: int
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    dedupe_by_input: bool
    limit_keys: _containers.RepeatedScalarFieldContainer[str]
    sequence_key: str
    singleton_key: str
    debounce: Debounce
    def __init__(self, kind: _Optional[str] = ..., payload: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., priority: _Optional[int] = ..., run_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_attempts: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., depends_on: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., dedupe_by_input: _Optional[bool] = ..., limit_keys: _Optional[_Iterable[str]] = ..., sequence_key: _Optional[str] = ..., singleton_key: _Optional[str] = ..., debounce: _Optional[_Union[Debounce, _Mapping]] = ...) -> None: ...

class Debounce(_message.Message):
    __slots__ = ("key", "quiet_seconds", "max_wait_seconds")
    KEY_FIELD_NUMBER: _ClassVar[int]
    QUIET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    quiet_seconds: float
    max_wait_seconds: float
    def __init__(self, key: _Optional[str] = ..., quiet_seconds: _Optional[float] = ..., max_wait_seconds: _Optional[float] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "created")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    job: Job
    created: bool
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("jobs", "ids_only")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    IDS_ONLY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobRequest]
    ids_only: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobRequest, _Mapping]]] = ..., ids_only: _Optional[bool] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("results", "job_ids", "created")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitJobResponse]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    created: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitJobResponse, _Mapping]]] = ..., job_ids: _Optional[_Iterable[str]] = ..., created: _Optional[_Iterable[bool]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "after_sequence", "include_progress")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_sequence: int
    include_progress: bool
    def __init__(self, job_id: _Optional[str] = ..., after_sequence: _Optional[int] = ..., include_progress: _Optional[bool] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("job_id", "reason", "accept_duplicate_risk", "clear_checkpoints")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_DUPLICATE_RISK_FIELD_NUMBER: _ClassVar[int]
    CLEAR_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    accept_duplicate_risk: bool
    clear_checkpoints: bool
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ..., accept_duplicate_risk: _Optional[bool] = ..., clear_checkpoints: _Optional[bool] = ...) -> None: ...

class GetJobResultRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ("job_id", "payload", "attempt", "fencing_token", "created_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    payload: bytes
    attempt: int
    fencing_token: int
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetLatestResultRequest(_message.Message):
    __slots__ = ("resource_key",)
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    def __init__(self, resource_key: _Optional[str] = ...) -> None: ...

class GetLatestResultResponse(_message.Message):
    __slots__ = ("resource_key", "resource_version", "result", "job")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    resource_version: int
    result: JobResult
    job: Job
    def __init__(self, resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., result: _Optional[_Union[JobResult, _Mapping]] = ..., job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "kind", "resource_key", "labels", "page_size", "page_token", "parent_job_id", "sequence_key")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STATES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_KEY_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    kind: str
    resource_key: str
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    parent_job_id: str
    sequence_key: str
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., kind: _Optional[str] = ..., resource_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., sequence_key: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListJobEventsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobLogsRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class JobLogLine(_message.Message):
    __slots__ = ("attempt", "fencing_token", "sequence", "at", "level", "logger", "message")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LOGGER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    fencing_token: int
    sequence: int
    at: _timestamp_pb2.Timestamp
    level: str
    logger: str
    message: str
    def __init__(self, attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., sequence: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., level: _Optional[str] = ..., logger: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListJobLogsResponse(_message.Message):
    __slots__ = ("lines", "next_page_token")
    LINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[JobLogLine]
    next_page_token: str
    def __init__(self, lines: _Optional[_Iterable[_Union[JobLogLine, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "sequence", "from_state", "to_state", "attempt", "fencing_token", "actor", "reason", "at", "error")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    sequence: int
    from_state: JobState
    to_state: JobState
    attempt: int
    fencing_token: int
    actor: str
    reason: str
    at: _timestamp_pb2.Timestamp
    error: JobError
    def __init__(self, job_id: _Optional[str] = ..., sequence: _Optional[int] = ..., from_state: _Optional[_Union[JobState, str]] = ..., to_state: _Optional[_Union[JobState, str]] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[_Union[JobError, _Mapping]] = ...) -> None: ...

class ListJobEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[JobEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[JobEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteResourceRequest(_message.Message):
    __slots__ = ("resource_key", "reason")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    reason: str
    def __init__(self, resource_key: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteResourceResponse(_message.Message):
    __slots__ = ("resource_key", "deleted_version", "cancelled_jobs", "deleted_results", "deleted_at")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    DELETED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_JOBS_FIELD_NUMBER: _ClassVar[int]
    DELETED_RESULTS_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    deleted_version: int
    cancelled_jobs: int
    deleted_results: int
    deleted_at: _timestamp_pb2.Timestamp
    def __init__(self, resource_key: _Optional[str] = ..., deleted_version: _Optional[int] = ..., cancelled_jobs: _Optional[int] = ..., deleted_results: _Optional[int] = ..., deleted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeliverySetMember(_message.Message):
    __slots__ = ("name", "job")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    job: SubmitJobRequest
    def __init__(self, name: _Optional[str] = ..., job: _Optional[_Union[SubmitJobRequest, _Mapping]] = ...) -> None: ...

class SubmitDeliverySetRequest(_message.Message):
    __slots__ = ("resource_key", "resource_version", "members", "fan_in", "failure_policy")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    FAN_IN_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    resource_version: int
    members: _containers.RepeatedCompositeFieldContainer[DeliverySetMember]
    fan_in: SubmitJobRequest
    failure_policy: DeliverySetFailurePolicy
    def __init__(self, resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., members: _Optional[_Iterable[_Union[DeliverySetMember, _Mapping]]] = ..., fan_in: _Optional[_Union[SubmitJobRequest, _Mapping]] = ..., failure_policy: _Optional[_Union[DeliverySetFailurePolicy, str]] = ...) -> None: ...

class DeliverySetMemberStatus(_message.Message):
    __slots__ = ("name", "job", "result")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    job: Job
    result: JobResult
    def __init__(self, name: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., result: _Optional[_Union[JobResult, _Mapping]] = ...) -> None: ...

class DeliverySet(_message.Message):
    __slots__ = ("set_id", "resource_key", "resource_version", "failure_policy", "state", "members", "fan_in", "fan_in_result", "created_at", "next_page_token")
    SET_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    FAN_IN_FIELD_NUMBER: _ClassVar[int]
    FAN_IN_RESULT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    set_id: str
    resource_key: str
    resource_version: int
    failure_policy: DeliverySetFailurePolicy
    state: DeliverySetState
    members: _containers.RepeatedCompositeFieldContainer[DeliverySetMemberStatus]
    fan_in: Job
    fan_in_result: JobResult
    created_at: _timestamp_pb2.Timestamp
    next_page_token: str
    def __init__(self, set_id: _Optional[str] = ..., resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., failure_policy: _Optional[_Union[DeliverySetFailurePolicy, str]] = ..., state: _Optional[_Union[DeliverySetState, str]] = ..., members: _Optional[_Iterable[_Union[DeliverySetMemberStatus, _Mapping]]] = ..., fan_in: _Optional[_Union[Job, _Mapping]] = ..., fan_in_result: _Optional[_Union[JobResult, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SubmitDeliverySetResponse(_message.Message):
    __slots__ = ("set", "created")
    SET_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    set: DeliverySet
    created: bool
    def __init__(self, set: _Optional[_Union[DeliverySet, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetDeliverySetRequest(_message.Message):
    __slots__ = ("resource_key", "resource_version", "page_token")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    resource_version: int
    page_token: str
    def __init__(self, resource_key: _Optional[str] = ..., resource_version: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetLatestDeliverySetRequest(_message.Message):
    __slots__ = ("resource_key", "page_token")
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    resource_key: str
    page_token: str
    def __init__(self, resource_key: _Optional[str] = ..., page_token: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "job", "cron", "time_zone", "overlap_policy", "catchup_window_seconds", "paused", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    job: SubmitJobRequest
    cron: str
    time_zone: str
    overlap_policy: ScheduleOverlapPolicy
    catchup_window_seconds: int
    paused: bool
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., job: _Optional[_Union[SubmitJobRequest, _Mapping]] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., overlap_policy: _Optional[_Union[ScheduleOverlapPolicy, str]] = ..., catchup_window_seconds: _Optional[int] = ..., paused: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("schedule_id", "job", "cron", "time_zone", "overlap_policy", "catchup_window_seconds", "paused", "note", "next_fire_at", "buffered_fire_at", "last_fire_at", "last_job_id", "fires_submitted", "fires_missed", "fires_skipped", "last_error", "created_at", "cron_warning")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FIRES_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    FIRES_MISSED_FIELD_NUMBER: _ClassVar[int]
    FIRES_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CRON_WARNING_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    job: SubmitJobRequest
    cron: str
    time_zone: str
    overlap_policy: ScheduleOverlapPolicy
    catchup_window_seconds: int
    paused: bool
    note: str
    next_fire_at: _timestamp_pb2.Timestamp
    buffered_fire_at: _timestamp_pb2.Timestamp
    last_fire_at: _timestamp_pb2.Timestamp
    last_job_id: str
    fires_submitted: int
    fires_missed: int
    fires_skipped: int
    last_error: str
    created_at: _timestamp_pb2.Timestamp
    cron_warning: str
    def __init__(self, schedule_id: _Optional[str] = ..., job: _Optional[_Union[SubmitJobRequest, _Mapping]] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., overlap_policy: _Optional[_Union[ScheduleOverlapPolicy, str]] = ..., catchup_window_seconds: _Optional[int] = ..., paused: _Optional[bool] = ..., note: _Optional[str] = ..., next_fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., buffered_fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_job_id: _Optional[str] = ..., fires_submitted: _Optional[int] = ..., fires_missed: _Optional[int] = ..., fires_skipped: _Optional[int] = ..., last_error: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cron_warning: _Optional[str] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("schedule_id", "note")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    note: str
    def __init__(self, schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("schedule", "job")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    job: Job
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ..., job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
