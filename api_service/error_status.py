"""Domain errors to gRPC status with google.rpc details: the one place this mapping happens."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from shared.domain import errors

ERROR_DOMAIN = "jobs.v1"

_CODES: list[tuple[type[errors.JobsError], int]] = [
    (errors.InvalidArgument, code_pb2.INVALID_ARGUMENT),
    (errors.NotFound, code_pb2.NOT_FOUND),
    (errors.AlreadyExists, code_pb2.ALREADY_EXISTS),
    (errors.FailedPrecondition, code_pb2.FAILED_PRECONDITION),
    (errors.ResourceExhausted, code_pb2.RESOURCE_EXHAUSTED),
    (errors.Unavailable, code_pb2.UNAVAILABLE),
    (errors.DeadlineExceeded, code_pb2.DEADLINE_EXCEEDED),
    (errors.Unauthenticated, code_pb2.UNAUTHENTICATED),
    (errors.PermissionDenied, code_pb2.PERMISSION_DENIED),
]


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_for(error: errors.JobsError) -> grpc.Status:
    """The status, message and details a caller receives for a domain error."""
    code = next((c for cls, c in _CODES if isinstance(error, cls)), code_pb2.INTERNAL)
    details = [_pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata))]
    if isinstance(error, errors.InvalidArgument):
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                        for v in error.violations
                    ]
                )
            )
        )
    if isinstance(error, errors.ResourceExhausted):
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(error.retry_after_seconds * 1000))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return rpc_status.to_status(status_pb2.Status(code=code, message=error.message, details=details))


def internal_status() -> grpc.Status:
    """For bugs: a fixed message, so no SQL, stack trace or data leaves the process."""
    return rpc_status.to_status(status_pb2.Status(code=code_pb2.INTERNAL, message="internal error"))
