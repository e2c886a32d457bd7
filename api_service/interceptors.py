"""Authentication, domain-error translation and RPC metrics for every JobService and WorkerService call."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeAlias, cast

import grpc

from api_service import request_context
from api_service.error_status import internal_status, status_for
from api_service.metrics import RpcMetrics
from api_service.principals import Principal, PrincipalDirectory, Role
from shared.domain.errors import FieldViolation, InvalidArgument, JobsError, PermissionDenied, Unauthenticated
from shared.storage.database import call_deadline

log = logging.getLogger(__name__)

_ROLES_BY_SERVICE = {
    "jobs.v1.JobService": frozenset({Role.TENANT}),
    "jobs.v1.WorkerService": frozenset({Role.WORKER}),
    "jobs.v1.AdminService": frozenset({Role.ADMIN, Role.ADMIN_READONLY}),
}
# The AdminService methods a read-only operator may call; every other AdminService method changes something.
ADMIN_READ_METHODS = frozenset(
    {"ListLimits", "ListTenantWeights", "ListKinds", "SearchJobs", "GetJob", "ListJobEvents"}
)

# The asyncio server's behaviors are coroutines (unary) and async generators (streams), which the
# stubs, written for the synchronous server, cannot express: requests and responses stay Any here.
# (Strings: the stubs' generic classes are not subscriptable at run time.)
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
UnaryBehavior: TypeAlias = Callable[[object, Context], Awaitable[Any]]
StreamBehavior: TypeAlias = Callable[[object, Context], AsyncIterator[Any]]
# What runs around every call of a method: it may refuse the call by raising, or abort it.
CallScope: TypeAlias = Callable[[object, Context], AbstractAsyncContextManager[None]]


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


def _scoped(handler: Handler, scope: CallScope) -> Handler:
    """The same method, each call run inside `scope`, with undecodable requests handed to the scope
    instead of failing in gRPC's deserializer. Client-streaming methods (none here) pass unchanged."""
    deserializer = _tolerant(handler.request_deserializer)
    if handler.unary_unary:
        inner = cast(UnaryBehavior, handler.unary_unary)

        async def unary(request: object, context: Context) -> Any:
            async with scope(request, context):
                return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, deserializer, handler.response_serializer)
    if handler.unary_stream:
        inner_stream = cast(StreamBehavior, handler.unary_stream)

        async def stream(request: object, context: Context) -> AsyncIterator[Any]:
            async with scope(request, context):
                async for message in inner_stream(request, context):
                    yield message

        return grpc.unary_stream_rpc_method_handler(stream, deserializer, handler.response_serializer)
    return handler


def _malformed() -> InvalidArgument:
    return InvalidArgument(FieldViolation("request", "is not a well-formed message of this method's type"))


def _split_method(full_method: str) -> tuple[str, str]:
    _, service, method = full_method.split("/", 2)
    return service, method


def _bearer_token(metadata: grpc.aio.Metadata | tuple[tuple[str, str | bytes], ...] | None) -> str | None:
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


async def _abort(context: Context, status: grpc.Status) -> None:
    await context.abort(status.code, status.details, status.trailing_metadata)


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates by role, runs the handler with the principal set, maps errors to status codes."""

    def __init__(self, principals: Callable[[], PrincipalDirectory], metrics: RpcMetrics) -> None:
        self._principals = principals
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, method = _split_method(handler_call_details.method)
        allowed = _ROLES_BY_SERVICE.get(service)
        if allowed is None:
            return _scoped(handler, _open_call)  # health and reflection are open, for probes and grpcurl
        if service == "jobs.v1.AdminService" and method not in ADMIN_READ_METHODS:
            allowed = frozenset({Role.ADMIN})
        principal, refusal = self._authenticate(handler_call_details.invocation_metadata, service, allowed)
        scope = functools.partial(self._guarded_call, principal=principal, refusal=refusal, labels=(service, method))
        return _scoped(handler, scope)

    def _authenticate(
        self, metadata: tuple[tuple[str, str | bytes], ...] | None, service: str, allowed: frozenset[Role]
    ) -> tuple[Principal | None, JobsError | None]:
        token = _bearer_token(metadata)
        if not token:
            return None, Unauthenticated("missing bearer token")
        principal = self._principals().authenticate(token)
        if principal is None:
            return None, Unauthenticated("unknown bearer token")
        if principal.role not in allowed:
            return None, PermissionDenied(
                f"this credential ({principal.role.value}) may not call this {service} method"
            )
        return principal, None

    @asynccontextmanager
    async def _guarded_call(
        self,
        request: object,
        context: Context,
        *,
        principal: Principal | None,
        refusal: JobsError | None,
        labels: tuple[str, str],
    ) -> AsyncIterator[None]:
        """One authenticated call: the principal set, the caller's deadline on every transaction, any
        error leaving as its status, and the call counted with the code it ended with."""
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        token = request_context.set_principal(principal) if principal else None
        try:
            if refusal:
                raise refusal
            if request is _UNDECODABLE:
                raise _malformed()
            with call_deadline(context.time_remaining()):
                yield
        except grpc.aio.AbortError:
            # abort() set the code; the stubs' "never None" is wrong only before it, which this guards.
            code = cast(grpc.StatusCode | None, context.code()) or grpc.StatusCode.UNKNOWN
            raise
        except Exception as error:  # noqa: BLE001 - every error must leave as a status
            status = _status_of(error, labels)
            code = status.code
            await _abort(context, status)
        finally:
            if token is not None:
                request_context.reset_principal(token)
            self._metrics.observe(labels, code, time.perf_counter() - started)


@asynccontextmanager
async def _open_call(request: object, context: Context) -> AsyncIterator[None]:
    """Unauthenticated methods (health) get the same answer to undecodable bytes as the rest."""
    if request is _UNDECODABLE:
        await _abort(context, status_for(_malformed()))
    yield
