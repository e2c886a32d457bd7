"""The client's errors: one class per status code a caller acts on, each with the API's details.

    try:
        jobs.submit("image.resize", {"url": url})
    except InvalidArgument as exc:
        print(exc.fields)          # {"kind": "unknown kind; known: echo, ..."}
    except ResourceExhausted as exc:
        time.sleep(exc.retry_after or 1)

Every gRPC error a client call meets becomes one of these, at one place (`from_rpc_error`); no
grpc.RpcError escapes the client.
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

from durable_jobs.rpc_details import rpc_error_details


class JobsError(Exception):
    """A call the API refused or could not answer. `code` is the gRPC status name, `reason` the
    google.rpc.ErrorInfo reason (empty when none was sent), `fields` the BadRequest's field violations
    (field path to description) and `retry_after` the RetryInfo delay in seconds, when given."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "UNKNOWN",
        reason: str = "",
        fields: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.fields: dict[str, str] = dict(fields or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}" if self.message else self.code
        return f"{text} (reason {self.reason})" if self.reason and self.reason != self.code else text


class InvalidArgument(JobsError):
    """Malformed or out-of-bounds input; `fields` names each bad field and why."""


class NotFound(JobsError):
    """No such job for this tenant (another tenant's job answers the same)."""


class AlreadyExists(JobsError):
    """The idempotency key was used before for a different request."""


class FailedPrecondition(JobsError):
    """The job's state does not allow it: a result of a job that has not succeeded, a cancel of a
    finished job, a retry of a running one."""


class ResourceExhausted(JobsError):
    """The tenant is over its quota or rate; `retry_after` says when to try again."""


class Unavailable(JobsError):
    """The API could not be reached or could not answer in time, even after the client's own retries.
    For a submission the job may or may not have been accepted: submit again with the same
    `idempotency_key` to find out (it names the same job)."""


class DeadlineExceeded(Unavailable):
    """The call's deadline (its `timeout`) passed first; as indeterminate as Unavailable."""


class PermissionDenied(JobsError):
    """The token is valid but its role may not call this service."""


class Unauthenticated(JobsError):
    """No token, or one the API does not know."""


class JobNotSucceeded(FailedPrecondition):
    """`result(wait=True)` followed a job that settled without succeeding; `job` is its last state."""

    def __init__(self, message: str, job: object) -> None:
        super().__init__(message, code="FAILED_PRECONDITION", reason="JOB_NOT_SUCCEEDED")
        self.job = job


_BY_CODE: dict[grpc.StatusCode, type[JobsError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}
# The codes after which a request may have taken effect or not: only an idempotent call is sent again.
INDETERMINATE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def from_rpc_error(error: grpc.RpcError) -> JobsError:
    """The JobsError for a failed call, with the details the API sent (and trusted, see rpc_details)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or ""
    cls = _BY_CODE.get(code, JobsError)
    details = rpc_error_details(error)
    if details is None:
        return cls(message, code=code.name)
    fields: dict[str, str] = {}
    for name, description in details.field_violations:
        fields[name] = f"{fields[name]}; {description}" if name in fields else description
    return cls(
        details.message or message,
        code=code.name,
        reason=details.reason,
        fields=fields,
        retry_after=details.retry_after_seconds,
    )
