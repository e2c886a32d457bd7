"""Every refusal the job service's API can give, classified PERMANENT (the same request will be refused
again: stop, and keep the reason) or TRANSIENT (the same request may succeed later: wait, then send it
again, with the same idempotency key).

One table, by gRPC status code and, where the code alone does not decide, the ErrorInfo reason (domain
`jobs.v1`). docs/GUARANTEES.md shows it (tests/unit/test_refusals.py holds the two, and every reason the
service raises, together). It needs grpc and the google.rpc messages only, so any client of the API (the
outbox relay, an SDK) can use it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import grpc
from google.rpc import error_details_pb2, status_pb2

ERROR_DOMAIN = "jobs.v1"
# Where gRPC carries the serialized google.rpc.Status of a failed call.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class Permanence(enum.StrEnum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class RefusalRule:
    code: grpc.StatusCode
    # The ErrorInfo reason; None for the code's rule when no reason of it is listed.
    reason: str | None
    permanence: Permanence
    why: str


P, T = Permanence.PERMANENT, Permanence.TRANSIENT
C = grpc.StatusCode

REFUSALS: tuple[RefusalRule, ...] = (
    RefusalRule(C.INVALID_ARGUMENT, None, P, "the request is malformed or out of bounds (BadRequest names each field)"),
    RefusalRule(C.NOT_FOUND, None, P, "no such job, key, set or schedule of this tenant"),
    RefusalRule(C.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED", P, "the key named another request"),
    RefusalRule(C.ALREADY_EXISTS, "SCHEDULE_EXISTS", P, "the tenant has a schedule of that id"),
    RefusalRule(C.ALREADY_EXISTS, None, P, "what the request would create exists already"),
    RefusalRule(C.FAILED_PRECONDITION, "RESOURCE_DELETED", P, "that version was deleted: its work publishes nothing"),
    RefusalRule(C.FAILED_PRECONDITION, "RESULT_NOT_READY", T, "the job has not succeeded yet"),
    RefusalRule(C.FAILED_PRECONDITION, "NO_RESULT", P, "the job ended without a result"),
    RefusalRule(C.FAILED_PRECONDITION, "JOB_ALREADY_ENDED", P, "the job is terminal: nothing to cancel"),
    RefusalRule(C.FAILED_PRECONDITION, "NOT_RETRYABLE", P, "only FAILED, CANCELLED, OUTCOME_UNKNOWN jobs retry"),
    RefusalRule(C.FAILED_PRECONDITION, "DUPLICATE_RISK_NOT_ACCEPTED", P, "the retry needs accept_duplicate_risk"),
    RefusalRule(C.FAILED_PRECONDITION, "NEWER_VERSION_EXISTS", P, "a newer version of the resource was submitted"),
    RefusalRule(C.FAILED_PRECONDITION, "DEPENDENCY_MISSING", P, "a dependency is gone (retention)"),
    RefusalRule(C.FAILED_PRECONDITION, "DEPENDENCY_FAILED", P, "a dependency ended without succeeding"),
    RefusalRule(C.FAILED_PRECONDITION, "DELIVERY_SET_CHANGED", P, "the set changed between pages: read it anew"),
    RefusalRule(C.FAILED_PRECONDITION, "TOO_MANY_JOBS", P, "the filter matches too many jobs: narrow it"),
    RefusalRule(C.FAILED_PRECONDITION, "COUNT_EXCEEDED", P, "more jobs match than the dry run counted: count again"),
    RefusalRule(C.FAILED_PRECONDITION, "LEASE_LOST", P, "a worker's lease is not the job's current one"),
    RefusalRule(C.FAILED_PRECONDITION, "JOB_CANCELLED", P, "a worker's job was cancelled"),
    RefusalRule(C.FAILED_PRECONDITION, "JOB_SUPERSEDED", P, "a worker's job was superseded"),
    RefusalRule(C.FAILED_PRECONDITION, "RESULT_TOO_LARGE", P, "the result is over JOBS_MAX_RESULT_BYTES"),
    RefusalRule(C.FAILED_PRECONDITION, "CHILDREN_REFUSED", P, "a job the handler spawned may not be created"),
    RefusalRule(C.FAILED_PRECONDITION, "CHECKPOINT_LIMIT", P, "the job has checkpointed as many stages as it may"),
    RefusalRule(C.FAILED_PRECONDITION, None, P, "the job's state does not allow the request"),
    RefusalRule(C.RESOURCE_EXHAUSTED, None, T, "over a rate, a quota or a stream bound: wait for RetryInfo's delay"),
    RefusalRule(C.UNAVAILABLE, None, T, "the database or the API is unreachable; the call may have taken effect"),
    RefusalRule(C.DEADLINE_EXCEEDED, None, T, "the deadline passed; the call may have taken effect"),
    RefusalRule(C.UNAUTHENTICATED, None, T, "no or an unknown credential: fixed, the same call passes"),
    RefusalRule(C.PERMISSION_DENIED, None, T, "the credential's role may not: fixed, the same call passes"),
    RefusalRule(C.INTERNAL, "ROWS_REJECTED", P, "the database refuses the rows the request names"),
    RefusalRule(C.INTERNAL, None, T, "a fault in the service; the call may have taken effect"),
    RefusalRule(C.UNKNOWN, None, T, "no status from the service (a proxy, a crash); the call may have taken effect"),
    RefusalRule(C.CANCELLED, None, T, "the call was cancelled before its answer"),
    RefusalRule(C.ABORTED, None, T, "a conflict that a later call may not meet"),
    RefusalRule(C.UNIMPLEMENTED, None, P, "this API does not serve the call (an older version)"),
    RefusalRule(C.OUT_OF_RANGE, None, P, "a value outside what the call serves"),
    RefusalRule(C.DATA_LOSS, None, P, "data the request needs is lost"),
)  # fmt: skip

_BY_KEY = {(rule.code, rule.reason): rule for rule in REFUSALS}


def rule_for(code: grpc.StatusCode, reason: str = "") -> RefusalRule:
    """The rule of a refusal: its reason's, else its code's (every code but OK has one)."""
    found = _BY_KEY.get((code, reason or None)) or _BY_KEY.get((code, None))
    if found is None:
        raise ValueError(f"{code.name} is not a refusal")
    return found


@dataclass(frozen=True)
class Refusal:
    """A failed call, as the rules see it."""

    code: grpc.StatusCode
    reason: str
    message: str
    # RetryInfo's delay, when the service gave one.
    retry_after_seconds: float | None

    @property
    def rule(self) -> RefusalRule:
        return rule_for(self.code, self.reason)

    @property
    def permanent(self) -> bool:
        return self.rule.permanence is Permanence.PERMANENT

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.code.name}{reason}: {self.message}"


def refusal_of(error: grpc.RpcError) -> Refusal:
    """The code, ErrorInfo reason and RetryInfo delay of a failed call (sync or asyncio)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or ""
    reason, retry_after = "", None
    for detail in _status(error).details:
        info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            reason = info.reason
        elif detail.Unpack(retry):
            retry_after = retry.retry_delay.ToMilliseconds() / 1000
    return Refusal(code, reason, message, retry_after)


def _status(error: grpc.RpcError) -> status_pb2.Status:
    metadata = error.trailing_metadata() if hasattr(error, "trailing_metadata") else ()
    for key, value in cast(Iterable[tuple[str, str | bytes]], metadata or ()):
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return status_pb2.Status()
