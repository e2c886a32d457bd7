"""gRPC errors as a person reads them: code, message, the google.rpc details, and the exit code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TextIO

import grpc

from durable_jobs.errors import JobsError
from durable_jobs.rpc_details import rpc_error_details

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_FAILED_PRECONDITION = 4
EXIT_UNAVAILABLE = 5
# How a job that `watch` or `result --wait` followed ended, when it did not succeed.
EXIT_JOB_FAILED = 6
EXIT_JOB_CANCELLED = 7
EXIT_JOB_OUTCOME_UNKNOWN = 8
# The field every request that names a job names it with.
JOB_ID_FIELD = "job_id"

_EXIT_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: EXIT_FAILED_PRECONDITION,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
}


@dataclass(frozen=True)
class RpcFailure:
    code: grpc.StatusCode
    message: str
    reason: str = ""
    field_violations: list[tuple[str, str]] = field(default_factory=list)
    retry_after_seconds: float | None = None

    @property
    def exit_code(self) -> int:
        if self.code == grpc.StatusCode.INVALID_ARGUMENT and self._only_the_job_id_is_malformed():
            # No job has an id of the wrong shape: to a script it is the same as a job that is not there.
            return EXIT_NOT_FOUND
        return _EXIT_BY_CODE.get(self.code, EXIT_OTHER)

    def _only_the_job_id_is_malformed(self) -> bool:
        return bool(self.field_violations) and all(f == JOB_ID_FIELD for f, _ in self.field_violations)

    def as_dict(self) -> dict[str, object]:
        """The --output json form, written to stderr."""
        error: dict[str, object] = {"code": self.code.name, "message": self.message}
        if self.reason:
            error["reason"] = self.reason
        if self.field_violations:
            error["field_violations"] = [{"field": f, "description": d} for f, d in self.field_violations]
        if self.retry_after_seconds is not None:
            error["retry_after_seconds"] = self.retry_after_seconds
        return {"error": error}

    def as_text(self) -> str:
        head = f"error: {self.code.name}"
        # The API's message for invalid input is its field violations joined; they follow one a line.
        if self.message and self.message != "; ".join(f"{f}: {d}" for f, d in self.field_violations):
            head += f": {self.message}"
        if self.reason and self.reason != self.code.name:
            head += f" (reason {self.reason})"
        lines = [head]
        lines += [f"  {f}: {d}" for f, d in self.field_violations]
        if self.retry_after_seconds is not None:
            lines.append(f"  retry after {self.retry_after_seconds:g}s")
        return "\n".join(lines)


def report(failure: RpcFailure, output: str, stderr: TextIO) -> int:
    """Writes the failure to stderr, as text or json (`output`); returns the exit code."""
    if output == "json":
        print(json.dumps(failure.as_dict(), indent=2), file=stderr)
    else:
        print(f"jobsctl: {failure.as_text()}", file=stderr)
    return failure.exit_code


def describe(error: grpc.RpcError) -> RpcFailure:
    """Reads the rich status from the call's trailing metadata when the server sent one."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or ""
    details = rpc_error_details(error)
    if details is None:
        return RpcFailure(code, message)
    return RpcFailure(
        code,
        details.message or message,
        details.reason,
        list(details.field_violations),
        details.retry_after_seconds,
    )


def from_jobs_error(error: JobsError) -> RpcFailure:
    """The same for a call made through the SDK's client, which has read the details already."""
    code = grpc.StatusCode[error.code] if error.code in grpc.StatusCode.__members__ else grpc.StatusCode.UNKNOWN
    return RpcFailure(code, error.message, error.reason, list(error.fields.items()), error.retry_after)
