"""What operators set and ask for: limits, tenant weights, kinds' pauses, job filters across tenants,
and what a bulk action did. The rules a well-formed request follows live here too, so that every caller
(the gRPC service, a console) refuses the same input with the same field named."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from shared.domain.errors import ViolationCollector
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobState
from shared.domain.kinds import KindPolicy
from shared.domain.submission_rules import check_text

LIMIT_KEY_MAX_CHARS = 200
TENANT_MAX_CHARS = 200
REASON_MAX_CHARS = 500
WEIGHT_RANGE = (1, 10000)
# What a claim can honour. Every claim that carries a rated key refills its bucket by rate × idle seconds
# in double precision: a rate in this range keeps that product finite and above zero for any idle time
# from a microsecond to a thousand years. Slower than one start in eleven days is a pause, not a rate;
# faster than a million a second, or more than a million running or in a bucket, bounds nothing.
RATE_PER_SECOND_RANGE = (1e-6, 1e6)
BURST_RANGE = (1, 1_000_000)
BURST_DEFAULT = 1
MAX_RUNNING_MAX = 1_000_000


@dataclass(frozen=True)
class Actor:
    """Who acts: the principal's name as job histories record it ("admin:alice")."""

    name: str


@dataclass(frozen=True)
class LimitSpec:
    """What SetLimit asks for; 0 means no bound of that kind."""

    key: str
    max_running: int = 0
    rate_per_second: float = 0.0
    burst: int = BURST_DEFAULT

    @classmethod
    def requested(cls, key: str, max_running: int = 0, rate_per_second: float = 0.0, burst: int = 0) -> LimitSpec:
        """As a caller gives it, where an unset field is 0: no bound of that kind, and a bucket of the
        default size (so `max_running` alone is a whole request)."""
        return cls(key, max_running, rate_per_second, burst or BURST_DEFAULT)


@dataclass(frozen=True)
class Limit:
    spec: LimitSpec
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True)
class TenantWeight:
    tenant: TenantId
    weight: int
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True)
class KindPause:
    paused_at: datetime
    paused_by: str
    reason: str


@dataclass(frozen=True)
class KindStatus:
    """A published kind as operators see it: its policy, whether it is paused, who publishes it."""

    policy: KindPolicy
    pause: KindPause | None
    publishers: tuple[str, ...]
    policy_conflict: bool
    retired_at: datetime | None


@dataclass(frozen=True)
class JobFilter:
    """Jobs across tenants; every condition given must hold, and None means "any"."""

    tenant: TenantId | None = None
    states: tuple[JobState, ...] = ()
    kind: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    resource_key: str | None = None
    # A case-insensitive substring of the latest error's message.
    error_text: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True)
class BulkRequest:
    """A bulk cancel or retry: without dry_run, expected_count (the dry run's count) is required and
    bounds how many jobs may be touched."""

    filter: JobFilter
    reason: str
    dry_run: bool
    expected_count: int = 0
    accept_duplicate_risk: bool = False


@dataclass(frozen=True)
class BulkSkip:
    job_id: JobId
    tenant: TenantId
    reason: str
    message: str


@dataclass(frozen=True)
class BulkOutcome:
    matched: int
    changed: int
    skipped: tuple[BulkSkip, ...]
    skipped_count: int
    dry_run: bool


def check_reason(violations: ViolationCollector, reason: str, *, required: bool = True) -> None:
    """A change to jobs says why (it goes into each job's history); a change to a setting may."""
    if required and not reason.strip():
        violations.add("reason", "is required: say why, it is recorded with your name")
    check_text(violations, "reason", reason, REASON_MAX_CHARS)


def check_name(violations: ViolationCollector, field_name: str, value: str, max_chars: int) -> None:
    """A key, tenant or kind: present, bounded, printable."""
    if not value:
        violations.add(field_name, "is required")
    check_text(violations, field_name, value, max_chars)


def check_limit_spec(violations: ViolationCollector, spec: LimitSpec) -> None:
    """Every value a claim can honour, and nothing else: see RATE_PER_SECOND_RANGE."""
    check_name(violations, "key", spec.key, LIMIT_KEY_MAX_CHARS)
    if not 0 <= spec.max_running <= MAX_RUNNING_MAX:
        violations.add("max_running", f"must be 0 (no bound) to {MAX_RUNNING_MAX}")
    low, high = RATE_PER_SECOND_RANGE
    rate = spec.rate_per_second
    if not math.isfinite(rate):
        violations.add("rate_per_second", "must be a finite number")
    elif rate != 0 and not low <= rate <= high:
        violations.add("rate_per_second", f"must be 0 (no bound) or from {low:f} to {high:.0f} starts per second")
    if not BURST_RANGE[0] <= spec.burst <= BURST_RANGE[1]:
        violations.add("burst", f"must be 1 to {BURST_RANGE[1]} (the token bucket's size; unset means 1)")
    if spec.max_running == 0 and spec.rate_per_second == 0:
        violations.add("max_running", "a limit needs max_running or rate_per_second above 0; DeleteLimit removes one")


def check_weight(violations: ViolationCollector, tenant: str, weight: int) -> None:
    check_name(violations, "tenant", tenant, TENANT_MAX_CHARS)
    low, high = WEIGHT_RANGE
    if not low <= weight <= high:
        violations.add("weight", f"must be between {low} and {high}")


def check_filter(violations: ViolationCollector, job_filter: JobFilter, prefix: str = "filter.") -> None:
    for name, value in (
        ("tenant", job_filter.tenant),
        ("kind", job_filter.kind),
        ("resource_key", job_filter.resource_key),
        ("error_text", job_filter.error_text),
    ):
        if value is not None:
            check_text(violations, prefix + name, value, 512)
    for key, value in job_filter.labels.items():
        check_text(violations, f"{prefix}labels[{key[:64]!r}]", key + value, 512)
    after, before = job_filter.created_after, job_filter.created_before
    if after is not None and before is not None and after >= before:
        violations.add(prefix + "created_before", "must be later than created_after")


def check_bulk(violations: ViolationCollector, request: BulkRequest) -> None:
    check_reason(violations, request.reason)
    check_filter(violations, request.filter)
    if request.expected_count < 0:
        violations.add("expected_count", "must not be negative")
    elif not request.dry_run and request.expected_count == 0:
        violations.add("expected_count", "is required unless dry_run: give the count a dry run returned")
