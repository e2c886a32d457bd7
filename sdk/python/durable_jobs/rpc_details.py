"""The google.rpc details (ErrorInfo, BadRequest, RetryInfo) that a gRPC error carries, read in one place.

The API writes them; the SDK's errors (durable_jobs.errors) are made from them, and the service's own
clients (the worker reads a refusal's reason, jobsctl shows all of them) read them here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import grpc
from google.rpc import error_details_pb2, status_pb2

# Where gRPC carries a serialized google.rpc.Status (the same key grpc_status writes).
STATUS_DETAILS_METADATA_KEY = "grpc-status-details-bin"


@dataclass(frozen=True)
class RpcErrorDetails:
    message: str
    # ErrorInfo.reason, e.g. LEASE_LOST; empty when the status had no ErrorInfo.
    reason: str = ""
    field_violations: tuple[tuple[str, str], ...] = ()
    retry_after_seconds: float | None = None


def rpc_error_details(error: grpc.RpcError) -> RpcErrorDetails | None:
    """The rich status of a failed call (sync or asyncio), or None when the server sent none, or sent
    one whose code or message contradicts the call's: such details describe some other error and are
    not trusted (grpc_status.rpc_status.from_call refuses them too)."""
    if not hasattr(error, "trailing_metadata"):  # a bare RpcError, raised before any call was made
        return None
    status = _rich_status(error)
    if status is None or status.code != error.code().value[0] or status.message != (error.details() or ""):
        return None
    reason, retry_after = "", None
    violations: tuple[tuple[str, str], ...] = ()
    for detail in status.details:
        info, bad, retry = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest(), error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason = info.reason
        elif detail.Unpack(bad):
            violations = tuple((v.field, v.description) for v in bad.field_violations)
        elif detail.Unpack(retry):
            retry_after = retry.retry_delay.ToMilliseconds() / 1000
    return RpcErrorDetails(status.message, reason, violations, retry_after)


def _rich_status(error: grpc.RpcError) -> status_pb2.Status | None:
    # A sync call's trailing metadata is a tuple of (key, value) named tuples, an asyncio call's a
    # Metadata of (key, value) pairs; the stubs give the former a shape without tuple unpacking.
    pairs = cast(Iterable[tuple[str, str | bytes]], error.trailing_metadata() or ())
    for key, value in pairs:
        if key == STATUS_DETAILS_METADATA_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None
