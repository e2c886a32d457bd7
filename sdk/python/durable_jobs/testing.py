"""Running a handler in a unit test, without a database, an API or a worker.

    from durable_jobs.testing import run_handler
    assert run_handler(resize, {"url": "...", "width": 64}) == b"..."

Receipts, checkpoints, progress and log lines are kept in memory for the context's lifetime: after
`run_handler(handler, ctx=context_for(payload))`, `ctx.receipt_book.receipts`, `ctx.checkpoints`,
`ctx.progress_sink.reports`, `ctx.log_sink.messages` and `ctx.spawned` (the jobs it spawned) show what
the handler recorded.
`context_for(checkpoints={...})` stands for stages an earlier attempt finished, and
`context_for(dependency_results={job_id: result})` for what the job's dependencies produced.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from durable_jobs.declaration import JobKinds, declared_handlers
from durable_jobs.handlers import Handler, HandlerRegistry, JobContext
from durable_jobs.ids import FencingToken, JobId, TenantId
from durable_jobs.logs import BoundedLog, LogLine, attempt_log_handler_installed, capturing, clean_line
from durable_jobs.payloads import encode_payload
from durable_jobs.records import Checkpoint, Receipt, encode_checkpoint_data

# Records of the standard logging kept while a handler runs here, as a worker at its default level keeps them.
CAPTURED_LEVEL = logging.INFO


@dataclass
class MemoryReceiptBook:
    """Receipts of one context's attempt, kept in memory; `earlier` stands for earlier attempts'."""

    attempt: int
    fencing_token: FencingToken
    receipts: list[Receipt] = field(default_factory=list)

    async def record_intent(self, step: str, intent: bytes) -> None:
        now = datetime.now(UTC)
        self.receipts.append(Receipt(self.attempt, step, self.fencing_token, intent, None, now, None))

    async def confirm(self, step: str, receipt: bytes) -> None:
        for index, existing in enumerate(self.receipts):
            if existing.attempt == self.attempt and existing.step == step and existing.receipt is None:
                self.receipts[index] = Receipt(
                    existing.attempt, step, existing.fencing_token, existing.intent, receipt,
                    existing.recorded_at, datetime.now(UTC),
                )  # fmt: skip
                return
        raise ValueError(f"no intent recorded for {step!r}")

    async def list(self) -> list[Receipt]:
        return list(self.receipts)


@dataclass
class MemoryCheckpointBook:
    """Checkpoints of one context's attempt, kept in memory."""

    attempt: int
    fencing_token: FencingToken

    async def record(self, stage: str, data: bytes) -> Checkpoint:
        return self.record_blocking(stage, data)

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        return Checkpoint(stage, data, self.attempt, self.fencing_token, datetime.now(UTC))


@dataclass
class MemoryProgress:
    """Every progress value a handler reported, in order (a worker sends fewer: the latest per interval)."""

    reports: list[tuple[float, str]] = field(default_factory=list)

    def report(self, fraction: float, message: str) -> None:
        self.reports.append((fraction, message))


@dataclass
class MemoryDependencyResults:
    """The results of the jobs a context's job depends on, as given."""

    results: dict[JobId, bytes] = field(default_factory=dict)

    async def read(self) -> dict[JobId, bytes]:
        return self.read_blocking()

    def read_blocking(self) -> dict[JobId, bytes]:
        return dict(self.results)


@dataclass
class MemoryLog:
    """The lines an attempt logged (ctx.log, and logging records inside the handler), bounded as a
    worker bounds them."""

    lines: list[LogLine] = field(default_factory=list)
    bound: BoundedLog = field(default_factory=BoundedLog)

    def write(self, line: LogLine) -> None:
        if self.bound.admit():
            self.lines.append(clean_line(line))

    @property
    def messages(self) -> list[str]:
        return [line.message for line in self.lines]


def context_for(
    payload: bytes = b"",
    *,
    kind: str = "test",
    attempt: int = 1,
    max_attempts: int = 3,
    tenant: str = "test-tenant",
    earlier_receipts: list[Receipt] | None = None,
    checkpoints: dict[str, object] | None = None,
    dependency_results: dict[str, bytes] | None = None,
) -> JobContext:
    """A context as a worker would build it for `attempt`, with in-memory receipts, checkpoints,
    progress and dependency results. `checkpoints` maps the stages an earlier attempt finished to their
    data (bytes or JSON); `dependency_results` maps dependency job ids to their results."""
    token = FencingToken(attempt)
    earlier = {
        stage: Checkpoint(stage, encode_checkpoint_data(data), max(attempt - 1, 1), FencingToken(1), datetime.now(UTC))
        for stage, data in (checkpoints or {}).items()
    }
    return JobContext(
        job_id=JobId("00000000-0000-4000-8000-000000000001"),
        tenant=TenantId(tenant),
        kind=kind,
        payload=payload,
        attempt=attempt,
        max_attempts=max_attempts,
        fencing_token=token,
        receipt_book=MemoryReceiptBook(attempt, token, list(earlier_receipts or [])),
        checkpoints=earlier,
        checkpoint_book=MemoryCheckpointBook(attempt, token),
        progress_sink=MemoryProgress(),
        dependency_source=MemoryDependencyResults({JobId(k): v for k, v in (dependency_results or {}).items()}),
        log_sink=MemoryLog(),
    )


def run_handler(
    handler: Callable[..., Any] | HandlerRegistry | JobKinds,
    payload: object = b"",
    *,
    kind: str | None = None,
    **context: Any,
) -> Any:
    """Runs a handler once, as the worker would, and returns what it returned (HandlerErrors propagate).

    `handler` is a function declared with `JobKinds.kind` (its payload decoded as declared), any
    handler of `ctx`, or a JobKinds or HandlerRegistry with `kind` naming one of its kinds. `payload` is
    bytes, a str or a JSON value (a dict, a dataclass), encoded as Client.submit would. `context`
    takes context_for's keywords. To see what the handler recorded, pass `ctx=context_for(...)`."""
    ctx, target = _prepared(handler, payload, kind, context)
    with attempt_log_handler_installed(CAPTURED_LEVEL), capturing(ctx.log_sink):
        result = target(ctx)
        if inspect.isawaitable(result):
            return asyncio.run(_awaited(result))
    return result


async def run_handler_async(
    handler: Callable[..., Any] | HandlerRegistry | JobKinds,
    payload: object = b"",
    *,
    kind: str | None = None,
    **context: Any,
) -> Any:
    """run_handler for a test that already runs an event loop (a coroutine handler runs on it)."""
    ctx, target = _prepared(handler, payload, kind, context)
    with attempt_log_handler_installed(CAPTURED_LEVEL), capturing(ctx.log_sink):
        result = target(ctx)
        if inspect.isawaitable(result):
            return await result
    return result


def _prepared(
    handler: Callable[..., Any] | HandlerRegistry | JobKinds, payload: object, kind: str | None, context: dict[str, Any]
) -> tuple[JobContext, Handler]:
    target, kind = _resolved(handler, kind)
    given = context.pop("ctx", None)
    if given is not None:
        if context or payload != b"":
            raise TypeError("run_handler(ctx=...) takes the payload and the rest from that context")
        return given, target
    return context_for(encode_payload(payload), kind=kind, **context), target


def _resolved(handler: Callable[..., Any] | HandlerRegistry | JobKinds, kind: str | None) -> tuple[Handler, str]:
    """What runs for `kind`, and the kind the context says."""
    if isinstance(handler, JobKinds):
        registry = HandlerRegistry()
        handler.register(registry)
        handler = registry
    if isinstance(handler, HandlerRegistry):
        names = sorted(handler.kinds())
        chosen = kind if kind is not None else (names[0] if len(names) == 1 else None)
        spec = handler.get(chosen) if chosen is not None else None
        if spec is None:
            raise KeyError(f"run_handler: name one of the kinds with kind=...; there are {', '.join(names)}")
        return spec.handler, spec.kind
    declared = declared_handlers(handler)
    if declared:
        chosen = kind if kind is not None else (next(iter(declared)) if len(declared) == 1 else None)
        if chosen not in declared:
            raise KeyError(f"run_handler: {handler!r} is declared as {', '.join(declared)}; pass kind=...")
        return declared[chosen], chosen
    return handler, kind or "test"


async def _awaited(result: Any) -> Any:
    return await result
