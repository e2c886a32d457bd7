import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from jobs.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Limit(_message.Message):
    __slots__ = ("key", "max_running", "rate_per_second", "burst", "updated_at", "updated_by")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    key: str
    max_running: int
    rate_per_second: float
    burst: int
    updated_at: _timestamp_pb2.Timestamp
    updated_by: str
    def __init__(self, key: _Optional[str] = ..., max_running: _Optional[int] = ..., rate_per_second: _Optional[float] = ..., burst: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_by: _Optional[str] = ...) -> None: ...

class SetLimitRequest(_message.Message):
    __slots__ = ("key", "max_running", "rate_per_second", "burst", "reason")
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    key: str
    max_running: int
    rate_per_second: float
    burst: int
    reason: str
    def __init__(self, key: _Optional[str] = ..., max_running: _Optional[int] = ..., rate_per_second: _Optional[float] = ..., burst: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class SetLimitResponse(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: Limit
    def __init__(self, limit: _Optional[_Union[Limit, _Mapping]] = ...) -> None: ...

class DeleteLimitRequest(_message.Message):
    __slots__ = ("key", "reason")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    key: str
    reason: str
    def __init__(self, key: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteLimitResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListLimitsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListLimitsResponse(_message.Message):
    __slots__ = ("limits",)
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    limits: _containers.RepeatedCompositeFieldContainer[Limit]
    def __init__(self, limits: _Optional[_Iterable[_Union[Limit, _Mapping]]] = ...) -> None: ...

class TenantWeight(_message.Message):
    __slots__ = ("tenant", "weight", "updated_at", "updated_by")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    weight: int
    updated_at: _timestamp_pb2.Timestamp
    updated_by: str
    def __init__(self, tenant: _Optional[str] = ..., weight: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_by: _Optional[str] = ...) -> None: ...

class SetTenantWeightRequest(_message.Message):
    __slots__ = ("tenant", "weight", "reason")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    weight: int
    reason: str
    def __init__(self, tenant: _Optional[str] = ..., weight: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class SetTenantWeightResponse(_message.Message):
    __slots__ = ("tenant_weight",)
    TENANT_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    tenant_weight: TenantWeight
    def __init__(self, tenant_weight: _Optional[_Union[TenantWeight, _Mapping]] = ...) -> None: ...

class ListTenantWeightsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantWeightsResponse(_message.Message):
    __slots__ = ("tenant_weights",)
    TENANT_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    tenant_weights: _containers.RepeatedCompositeFieldContainer[TenantWeight]
    def __init__(self, tenant_weights: _Optional[_Iterable[_Union[TenantWeight, _Mapping]]] = ...) -> None: ...

class Kind(_message.Message):
    __slots__ = ("kind", "max_attempts", "backoff_base_seconds", "backoff_cap_seconds", "timeout_seconds", "external_side_effects", "limit_keys", "executor", "paused", "paused_at", "paused_by", "pause_reason", "publishers", "policy_conflict", "retired_at")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_BASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_CAP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEYS_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_AT_FIELD_NUMBER: _ClassVar[int]
    PAUSED_BY_FIELD_NUMBER: _ClassVar[int]
    PAUSE_REASON_FIELD_NUMBER: _ClassVar[int]
    PUBLISHERS_FIELD_NUMBER: _ClassVar[int]
    POLICY_CONFLICT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    max_attempts: int
    backoff_base_seconds: float
    backoff_cap_seconds: float
    timeout_seconds: float
    external_side_effects: bool
    limit_keys: _containers.RepeatedScalarFieldContainer[str]
    executor: str
    paused: bool
    paused_at: _timestamp_pb2.Timestamp
    paused_by: str
    pause_reason: str
    publishers: _containers.RepeatedScalarFieldContainer[str]
    policy_conflict: bool
    retired_at: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[str] = ..., max_attempts: _Optional[int] = ..., backoff_base_seconds: _Optional[float] = ..., backoff_cap_seconds: _Optional[float] = ..., timeout_seconds: _Optional[float] = ..., external_side_effects: _Optional[bool] = ..., limit_keys: _Optional[_Iterable[str]] = ..., executor: _Optional[str] = ..., paused: _Optional[bool] = ..., paused_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., paused_by: _Optional[str] = ..., pause_reason: _Optional[str] = ..., publishers: _Optional[_Iterable[str]] = ..., policy_conflict: _Optional[bool] = ..., retired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListKindsRequest(_message.Message):
    __slots__ = ("include_retired",)
    INCLUDE_RETIRED_FIELD_NUMBER: _ClassVar[int]
    include_retired: bool
    def __init__(self, include_retired: _Optional[bool] = ...) -> None: ...

class ListKindsResponse(_message.Message):
    __slots__ = ("kinds",)
    KINDS_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedCompositeFieldContainer[Kind]
    def __init__(self, kinds: _Optional[_Iterable[_Union[Kind, _Mapping]]] = ...) -> None: ...

class PauseKindRequest(_message.Message):
    __slots__ = ("kind", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    reason: str
    def __init__(self, kind: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseKindResponse(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: Kind
    def __init__(self, kind: _Optional[_Union[Kind, _Mapping]] = ...) -> None: ...

class ResumeKindRequest(_message.Message):
    __slots__ = ("kind", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    reason: str
    def __init__(self, kind: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResumeKindResponse(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: Kind
    def __init__(self, kind: _Optional[_Union[Kind, _Mapping]] = ...) -> None: ...

class RetireKindRequest(_message.Message):
    __slots__ = ("kind", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    reason: str
    def __init__(self, kind: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RetireKindResponse(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: str
    def __init__(self, kind: _Optional[str] = ...) -> None: ...

class JobFilter(_message.Message):
    __slots__ = ("tenant", "states", "kind", "labels", "resource_key", "error_text", "created_after", "created_before")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_KEY_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    states: _containers.RepeatedScalarFieldContainer[_jobs_pb2.JobState]
    kind: str
    labels: _containers.ScalarMap[str, str]
    resource_key: str
    error_text: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    def __init__(self, tenant: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_jobs_pb2.JobState, str]]] = ..., kind: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., resource_key: _Optional[str] = ..., error_text: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TenantJob(_message.Message):
    __slots__ = ("tenant", "job")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    job: _jobs_pb2.Job
    def __init__(self, tenant: _Optional[str] = ..., job: _Optional[_Union[_jobs_pb2.Job, _Mapping]] = ...) -> None: ...

class SearchJobsRequest(_message.Message):
    __slots__ = ("filter", "page_size", "page_token")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    filter: JobFilter
    page_size: int
    page_token: str
    def __init__(self, filter: _Optional[_Union[JobFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SearchJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[TenantJob]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[TenantJob, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AdminServiceGetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class AdminServiceGetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: TenantJob
    def __init__(self, job: _Optional[_Union[TenantJob, _Mapping]] = ...) -> None: ...

class AdminServiceListJobEventsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AdminServiceListJobEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.JobEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_jobs_pb2.JobEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class BulkSkip(_message.Message):
    __slots__ = ("job_id", "tenant", "reason", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant: str
    reason: str
    message: str
    def __init__(self, job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class CancelJobsRequest(_message.Message):
    __slots__ = ("filter", "reason", "dry_run", "expected_count")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    filter: JobFilter
    reason: str
    dry_run: bool
    expected_count: int
    def __init__(self, filter: _Optional[_Union[JobFilter, _Mapping]] = ..., reason: _Optional[str] = ..., dry_run: _Optional[bool] = ..., expected_count: _Optional[int] = ...) -> None: ...

class CancelJobsResponse(_message.Message):
    __slots__ = ("matched_count", "changed_count", "skipped", "skipped_count", "dry_run")
    MATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    matched_count: int
    changed_count: int
    skipped: _containers.RepeatedCompositeFieldContainer[BulkSkip]
    skipped_count: int
    dry_run: bool
    def __init__(self, matched_count: _Optional[int] = ..., changed_count: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[BulkSkip, _Mapping]]] = ..., skipped_count: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RetryJobsRequest(_message.Message):
    __slots__ = ("filter", "reason", "dry_run", "expected_count", "accept_duplicate_risk")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_DUPLICATE_RISK_FIELD_NUMBER: _ClassVar[int]
    filter: JobFilter
    reason: str
    dry_run: bool
    expected_count: int
    accept_duplicate_risk: bool
    def __init__(self, filter: _Optional[_Union[JobFilter, _Mapping]] = ..., reason: _Optional[str] = ..., dry_run: _Optional[bool] = ..., expected_count: _Optional[int] = ..., accept_duplicate_risk: _Optional[bool] = ...) -> None: ...

class RetryJobsResponse(_message.Message):
    __slots__ = ("matched_count", "changed_count", "skipped", "skipped_count", "dry_run")
    MATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    matched_count: int
    changed_count: int
    skipped: _containers.RepeatedCompositeFieldContainer[BulkSkip]
    skipped_count: int
    dry_run: bool
    def __init__(self, matched_count: _Optional[int] = ..., changed_count: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[BulkSkip, _Mapping]]] = ..., skipped_count: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...
