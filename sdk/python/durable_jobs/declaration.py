"""Declaring job kinds at module level, with optional typed payloads.

    kinds = JobKinds()

    @dataclass
    class Resize:
        url: str
        width: int

    @kinds.kind("image.resize", max_attempts=5, payload=Resize)
    def resize(ctx: JobContext, request: Resize) -> bytes: ...

A module that holds a `JobKinds` is loaded like one that defines `register(registry)`. A payload that is
not the declared dataclass's JSON fails the attempt as PERMANENT, naming the field.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from durable_jobs.handlers import Handler, HandlerRegistry, JobContext, PermanentError
from durable_jobs.kinds import (
    BACKOFF_BASE_SECONDS_DEFAULT,
    BACKOFF_CAP_SECONDS_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    Executor,
)

F = TypeVar("F", bound=Callable[..., Any])
# The kinds each declared function was declared as, and what runs for each (the typed wrapper when a
# payload type was given): how the test helper runs a declared function as the worker would.
_DECLARED: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Handler]] = weakref.WeakKeyDictionary()


class JobKinds:
    """A set of job kinds declared where their handlers are written; registered as a whole."""

    def __init__(self) -> None:
        self._declared: list[tuple[str, dict[str, Any], Handler]] = []

    def kind(
        self,
        kind: str,
        *,
        payload: type | None = None,
        max_attempts: int = MAX_ATTEMPTS_DEFAULT,
        timeout_seconds: float | None = None,
        external_side_effects: bool = False,
        backoff_base_seconds: float = BACKOFF_BASE_SECONDS_DEFAULT,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS_DEFAULT,
        executor: Executor | str | None = None,
        limit_keys: tuple[str, ...] | list[str] = (),
    ) -> Callable[[F], F]:
        """Declares `kind` with the decorated handler; the policy keywords are HandlerRegistry.register's.
        With `payload=` (a dataclass), the handler is `handler(ctx, payload)` and gets the decoded
        payload. The handler is returned unchanged, so it can still be called (and tested) directly."""
        policy: dict[str, Any] = {
            "max_attempts": max_attempts,
            "timeout_seconds": timeout_seconds,
            "external_side_effects": external_side_effects,
            "backoff_base_seconds": backoff_base_seconds,
            "backoff_cap_seconds": backoff_cap_seconds,
            "executor": executor,
            "limit_keys": limit_keys,
        }

        def declare(handler: F) -> F:
            if payload is not None and not dataclasses.is_dataclass(payload):
                raise TypeError(f"job kind {kind!r}: payload must be a dataclass, not {payload!r}")
            target: Handler = handler if payload is None else typed_handler(handler, payload)
            self._declared.append((kind, policy, target))
            _DECLARED.setdefault(handler, {})[kind] = target
            return handler

        return declare

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self._declared]

    def register(self, registry: HandlerRegistry) -> None:
        for kind, policy, handler in self._declared:
            registry.register(kind, **policy)(handler)


def declared_handlers(function: Callable[..., Any]) -> dict[str, Handler]:
    """The kinds `function` was declared as with JobKinds, and the handler of `ctx` that runs for each."""
    return dict(_DECLARED.get(function, {}))


def typed_handler(handler: Callable[..., Any], payload_type: type) -> Handler:
    """`handler(ctx, payload)` as a handler of `ctx` alone; keeps the handler's shape (async or plain)
    and stays picklable for process kinds (module-level parts only)."""
    if inspect.iscoroutinefunction(handler):
        return _AsyncTypedHandler(handler, payload_type)
    return _TypedHandler(handler, payload_type)


@dataclasses.dataclass(frozen=True)
class _TypedHandler:
    handler: Any
    payload_type: type

    def __call__(self, ctx: JobContext) -> Any:
        return self.handler(ctx, decode_payload(ctx.payload, self.payload_type))

    @property
    def __wrapped__(self) -> Any:
        """The declared handler, for inspect.unwrap (and the check that a process handler is
        module-level)."""
        return self.handler


@dataclasses.dataclass(frozen=True)
class _AsyncTypedHandler(_TypedHandler):
    async def __call__(self, ctx: JobContext) -> Any:
        return await self.handler(ctx, decode_payload(ctx.payload, self.payload_type))


def decode_payload(payload: bytes, payload_type: type) -> Any:
    """The dataclass from the payload's JSON object; PermanentError naming the first bad field."""
    try:
        data = json.loads(payload or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise PermanentError(f"payload: not JSON ({exc})") from None
    return _decode(data, payload_type, "payload")


def _decode(value: Any, annotation: Any, path: str) -> Any:
    if dataclasses.is_dataclass(annotation):
        return _decode_dataclass(value, annotation, path)  # type: ignore[arg-type]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _decode(value, options[0], path)
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise PermanentError(f"{path}: must be a list")
        item = args[0] if args else Any
        decoded = [_decode(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return decoded if origin is list else tuple(decoded)
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise PermanentError(f"{path}: must be an object")
        return value
    if annotation is Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (str, int, float, bool) and (
        not isinstance(value, annotation) or (annotation is int and isinstance(value, bool))
    ):
        raise PermanentError(f"{path}: must be {annotation.__name__}, not {type(value).__name__}")
    return value


def _decode_dataclass(value: Any, cls: type, path: str) -> Any:
    if not isinstance(value, dict):
        raise PermanentError(f"{path}: must be a JSON object")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise PermanentError(f"{path}.{unknown[0]}: is not a field of {cls.__name__}")
    decoded = {}
    for name, field in fields.items():
        if name not in value:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise PermanentError(f"{path}.{name}: is required")
            continue
        decoded[name] = _decode(value[name], hints[name], f"{path}.{name}")
    return cls(**decoded)
