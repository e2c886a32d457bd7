"""Authentication, domain-error translation and RPC metrics for every JobService and WorkerService call."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from api_service import request_context
from api_service.error_status import internal_status, status_for
from api_service.metrics import RpcMetrics
from api_service.principals import Principal, PrincipalDirectory, Role
from shared.domain.errors import FieldViolation, InvalidArgument, JobsError, PermissionDenied, Unauthenticated
from shared.storage.database import call_deadline

log = logging.getLogger(__name__)

_ROLE_BY_SERVICE = {"jobs.v1.JobService": Role.TENANT, "jobs.v1.WorkerService": Role.WORKER}


class _Undecodable:
    """Stands in for a request whose bytes did not parse, so the refusal can be INVALID_ARGUMENT (gRPC
    itself would answer UNKNOWN, naming the parser's exception)."""


_UNDECODABLE = _Undecodable()


def _tolerant(deserializer: Callable[[bytes], object] | None) -> Callable[[bytes], object] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> object:
        try:
            return deserializer(data)
        except Exception:  # noqa: BLE001 - DecodeError, or whatever else hostile bytes provoke
            return _UNDECODABLE

    return deserialize


def _malformed() -> InvalidArgument:
    return InvalidArgument(FieldViolation("request", "is not a well-formed message of this method's type"))


def _split_method(full_method: str) -> tuple[str, str]:
    _, service, method = full_method.split("/", 2)
    return service, method


def _bearer_token(metadata) -> str | None:
    """The token of `authorization: Bearer <token>`; the scheme's case does not matter (RFC 6750, 2.1)."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return None


def _status_of(error: Exception, labels: tuple[str, str] | None = None) -> grpc.Status:
    """The caller's status; an error outside the tree is a bug, logged here with its stack."""
    if isinstance(error, JobsError):
        return status_for(error)
    log.exception("unexpected error in %s/%s", *(labels or ("?", "?")))
    return internal_status()


async def _abort(context: grpc.aio.ServicerContext, status: grpc.Status) -> None:
    await context.abort(status.code, status.details, status.trailing_metadata)


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates by role, runs the handler with the principal set, maps errors to status codes."""

    def __init__(self, principals: Callable[[], PrincipalDirectory], metrics: RpcMetrics) -> None:
        self._principals = principals
        self._metrics = metrics

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, method = _split_method(handler_call_details.method)
        required_role = _ROLE_BY_SERVICE.get(service)
        if required_role is None:
            return _guard_open(handler)  # health and reflection are open, for probes and grpcurl
        principal, refusal = self._authenticate(handler_call_details.invocation_metadata, required_role)
        labels = (service, method)
        if handler.unary_unary:
            behavior = self._wrap_unary(handler.unary_unary, principal, refusal, labels)
            return grpc.unary_unary_rpc_method_handler(
                behavior, _tolerant(handler.request_deserializer), handler.response_serializer
            )
        if handler.unary_stream:
            behavior = self._wrap_stream(handler.unary_stream, principal, refusal, labels)
            return grpc.unary_stream_rpc_method_handler(
                behavior, _tolerant(handler.request_deserializer), handler.response_serializer
            )
        return handler

    def _authenticate(self, metadata, required: Role) -> tuple[Principal | None, JobsError | None]:
        token = _bearer_token(metadata)
        if not token:
            return None, Unauthenticated("missing bearer token")
        principal = self._principals().authenticate(token)
        if principal is None:
            return None, Unauthenticated("unknown bearer token")
        if principal.role is not required:
            return None, PermissionDenied(f"this credential may not call {required.value} methods")
        return principal, None

    def _wrap_unary(self, inner, principal, refusal, labels) -> Callable[..., Awaitable]:
        async def behavior(request, context):
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            token = request_context.set_principal(principal) if principal else None
            try:
                if refusal:
                    raise refusal
                if request is _UNDECODABLE:
                    raise _malformed()
                with call_deadline(context.time_remaining()):
                    return await inner(request, context)
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as error:  # noqa: BLE001 - every error must leave as a status
                status = _status_of(error, labels)
                code = status.code
                await _abort(context, status)
            finally:
                if token is not None:
                    request_context.reset_principal(token)
                self._metrics.observe(labels, code, time.perf_counter() - started)

        return behavior

    def _wrap_stream(self, inner, principal, refusal, labels) -> Callable[..., AsyncIterator]:
        async def behavior(request, context):
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            token = request_context.set_principal(principal) if principal else None
            try:
                if refusal:
                    raise refusal
                if request is _UNDECODABLE:
                    raise _malformed()
                with call_deadline(context.time_remaining()):
                    async for message in inner(request, context):
                        yield message
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as error:  # noqa: BLE001
                status = _status_of(error, labels)
                code = status.code
                await _abort(context, status)
            finally:
                if token is not None:
                    request_context.reset_principal(token)
                self._metrics.observe(labels, code, time.perf_counter() - started)

        return behavior


def _guard_open(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Unauthenticated methods (health) get the same answer to undecodable bytes as the rest."""
    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary(request, context):
            if request is _UNDECODABLE:
                await _abort(context, status_for(_malformed()))
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary, _tolerant(handler.request_deserializer), handler.response_serializer
        )
    if handler.unary_stream:
        inner_stream = handler.unary_stream

        async def stream(request, context):
            if request is _UNDECODABLE:
                await _abort(context, status_for(_malformed()))
            async for message in inner_stream(request, context):
                yield message

        return grpc.unary_stream_rpc_method_handler(
            stream, _tolerant(handler.request_deserializer), handler.response_serializer
        )
    return handler
