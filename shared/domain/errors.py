"""The one error tree. Storage maps database errors into it; the API maps it to gRPC status codes."""

from __future__ import annotations

from dataclasses import dataclass, field


class JobsError(Exception):
    """Base of every error the service reports to a caller."""

    reason: str = "ERROR"

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata or {})


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class InvalidArgument(JobsError):
    reason = "INVALID_ARGUMENT"

    def __init__(self, violations: list[FieldViolation] | FieldViolation) -> None:
        items = violations if isinstance(violations, list) else [violations]
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in items))
        self.violations = items


class NotFound(JobsError):
    """No such job for this caller; identical whether the job is absent or another tenant's."""

    reason = "NOT_FOUND"

    def __init__(self, message: str = "job not found") -> None:
        super().__init__(message)


class AlreadyExists(JobsError):
    reason = "IDEMPOTENCY_KEY_REUSED"


class FailedPrecondition(JobsError):
    """The job is not in a state that allows the request."""

    reason = "FAILED_PRECONDITION"

    def __init__(self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None):
        super().__init__(message, metadata=metadata)
        if reason:
            self.reason = reason


class LeaseLost(FailedPrecondition):
    reason = "LEASE_LOST"

    def __init__(self, message: str = "the lease is no longer held") -> None:
        super().__init__(message)


class JobCancelled(FailedPrecondition):
    reason = "JOB_CANCELLED"

    def __init__(self, message: str = "the job was cancelled") -> None:
        super().__init__(message)


class JobSuperseded(FailedPrecondition):
    reason = "JOB_SUPERSEDED"

    def __init__(self, message: str = "a newer version of the resource was submitted") -> None:
        super().__init__(message)


class ResourceDeleted(FailedPrecondition):
    reason = "RESOURCE_DELETED"

    def __init__(self, message: str = "this version of the resource was deleted") -> None:
        super().__init__(message)


class ResourceExhausted(JobsError):
    reason = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, *, retry_after_seconds: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class Unavailable(JobsError):
    """Indeterminate: the request may or may not have taken effect (for example a lost COMMIT reply)."""

    reason = "UNAVAILABLE"


class DatabaseUnreachable(Unavailable):
    """Unavailable because of the database itself, not of one statement: no connection could be had in
    time (it is down), one stopped answering, or the server stopped taking writes. Whatever is tried next
    meets the same database again. Callers see it as Unavailable."""


class DeadlineExceeded(JobsError):
    """Indeterminate, like Unavailable: the caller's deadline ran out."""

    reason = "DEADLINE_EXCEEDED"


class RowsRejected(JobsError):
    """The database refused a statement for the rows it touched (a value out of range, a violated
    constraint, a trigger's error): the same statement over other rows may succeed."""

    reason = "ROWS_REJECTED"


class Unauthenticated(JobsError):
    reason = "UNAUTHENTICATED"


class PermissionDenied(JobsError):
    reason = "PERMISSION_DENIED"


@dataclass
class ViolationCollector:
    """Gathers every bad field of a request so the caller hears about all of them at once."""

    prefix: str = ""
    violations: list[FieldViolation] = field(default_factory=list)

    def add(self, name: str, description: str) -> None:
        self.violations.append(FieldViolation(f"{self.prefix}{name}", description))

    def raise_if_any(self) -> None:
        if self.violations:
            raise InvalidArgument(self.violations)
