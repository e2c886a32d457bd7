"""The job kinds of a chaos run, loaded by its workers (JOBS_HANDLER_MODULES=chaos.handlers). Each
attempt appends to the run's history what the handler saw and did: its start (attempt and fencing
token), its external call's intent and confirmation, its checkpoints, and how it ended, with the exact
result it returned. A result names the job, token and attempt it came from and a nonce, so the checker
can tell which attempt produced the result the database stored.

The payload of each kind is JSON; chaos/workload.py writes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from chaos.history import HISTORY_FILE_ENV, HistoryWriter
from shared.handlers import (
    HandlerError,
    HandlerRegistry,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    RetryableError,
)

QUICK = "chaos.quick"
FLAKY = "chaos.flaky"
INTENT = "chaos.intent"
LONG = "chaos.long"
LIMITED = "chaos.limited"
PAUSABLE = "chaos.pausable"
BLOCKING = "chaos.blocking"
KINDS = (QUICK, FLAKY, INTENT, LONG, LIMITED, PAUSABLE, BLOCKING)
# Short backoffs keep a run's retries inside its length, and its settling short.
BACKOFF_BASE_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 1.0
MAX_ATTEMPTS = 10
# The step name of chaos.intent's external call.
CALL_STEP = "call"
# How often a plain handler looks at its stop signal.
STOP_POLL_SECONDS = 0.05

AsyncHandler = Callable[[JobContext], Awaitable[bytes]]


class ChaosHandlers:
    def __init__(self, history: HistoryWriter | None) -> None:
        self._history = history

    def record(self, event: str, ctx: JobContext, **fields: Any) -> None:
        if self._history is not None:
            self._history.record(event, job_id=ctx.job_id, token=ctx.fencing_token, attempt=ctx.attempt, **fields)

    def recorded(self, body: AsyncHandler) -> AsyncHandler:
        """`body` with its start and its end in the history."""

        async def handler(ctx: JobContext) -> bytes:
            self.record("handler.start", ctx, tenant=ctx.tenant, kind=ctx.kind, pid=os.getpid())
            try:
                result = await body(ctx)
            except asyncio.CancelledError:
                self.record("handler.end", ctx, outcome="stopped")
                raise
            except HandlerError as exc:
                self.record("handler.end", ctx, outcome="raised", category=exc.category.value)
                raise
            except Exception as exc:
                self.record("handler.end", ctx, outcome="raised", category="unclassified", error=type(exc).__name__)
                raise
            self.record("handler.end", ctx, outcome="returned", result=result.decode())
            return result

        return handler

    async def quick(self, ctx: JobContext) -> bytes:
        await asyncio.sleep(random.uniform(0.0, 0.05))
        return result_of(ctx)

    async def flaky(self, ctx: JobContext) -> bytes:
        spec = _payload(ctx)
        if ctx.attempt <= int(spec.get("fail", 0)):
            category = str(spec.get("category", "retryable"))
            message = f"failing attempt {ctx.attempt} on purpose"
            if category == "permanent":
                raise PermanentError(message)
            if category == "unknown":
                raise OutcomeUnknownError(message)
            if category == "crash":
                raise RuntimeError(message)
            raise RetryableError(message)
        return result_of(ctx)

    async def intent(self, ctx: JobContext) -> bytes:
        """An external call between record_intent and confirm: cut off there, its outcome is unknown."""
        try:
            await ctx.record_intent(CALL_STEP, ctx.job_id.encode())
        except Exception as exc:
            self.record("handler.intent", ctx, step=CALL_STEP, ok=False, error=type(exc).__name__)
            raise
        self.record("handler.intent", ctx, step=CALL_STEP, ok=True)
        await asyncio.sleep(float(_payload(ctx).get("call_seconds", 0.1)))
        try:
            await ctx.confirm(CALL_STEP, f"receipt-{ctx.fencing_token}".encode())
        except Exception as exc:
            self.record("handler.confirm", ctx, step=CALL_STEP, ok=False, error=type(exc).__name__)
            raise
        self.record("handler.confirm", ctx, step=CALL_STEP, ok=True)
        return result_of(ctx)

    async def long(self, ctx: JobContext) -> bytes:
        """Stages with a checkpoint each; a later attempt skips the stages an earlier one finished."""
        spec = _payload(ctx)
        stages = int(spec.get("stages", 3))
        for number in range(stages):
            stage = f"stage-{number}"
            if ctx.completed_stage(stage) is not None:
                continue
            await asyncio.sleep(float(spec.get("stage_seconds", 0.5)))
            try:
                await ctx.checkpoint(stage, {"token": ctx.fencing_token})
            except Exception as exc:
                self.record("handler.checkpoint", ctx, stage=stage, ok=False, error=type(exc).__name__)
                raise
            self.record("handler.checkpoint", ctx, stage=stage, ok=True)
            ctx.report_progress((number + 1) / stages, stage)
        return result_of(ctx)

    async def sleeping(self, ctx: JobContext) -> bytes:
        """Sleeps `seconds`, or the attempt's own entry of `seconds_by_attempt` (the last one for later
        attempts), so that a scripted scenario can make one attempt outlast another."""
        spec = _payload(ctx)
        by_attempt = spec.get("seconds_by_attempt")
        if isinstance(by_attempt, list) and by_attempt:
            seconds = float(by_attempt[min(ctx.attempt, len(by_attempt)) - 1])
        else:
            seconds = float(spec.get("seconds", 0.1))
        await asyncio.sleep(seconds)
        return result_of(ctx)

    def blocking(self, ctx: JobContext) -> bytes:
        """A plain handler in the worker's thread pool: it polls its stop signal, as plain handlers must."""
        self.record("handler.start", ctx, tenant=ctx.tenant, kind=ctx.kind, pid=os.getpid())
        until = time.monotonic() + float(_payload(ctx).get("seconds", 0.2))
        while time.monotonic() < until:
            if ctx.stop_requested.wait_blocking(STOP_POLL_SECONDS):
                self.record("handler.end", ctx, outcome="stopped")
                return b""
        result = result_of(ctx)
        self.record("handler.end", ctx, outcome="returned", result=result.decode())
        return result


def result_of(ctx: JobContext) -> bytes:
    """Names the attempt it came from; the nonce makes two attempts' results differ even when a token
    were ever reused."""
    fields = {"job": ctx.job_id, "token": ctx.fencing_token, "attempt": ctx.attempt, "nonce": secrets.token_hex(6)}
    return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()


def _payload(ctx: JobContext) -> dict[str, Any]:
    try:
        decoded = json.loads(ctx.payload or b"{}")
    except ValueError as exc:
        raise PermanentError("payload is not JSON") from exc
    if not isinstance(decoded, dict):
        raise PermanentError("payload is not a JSON object")
    return decoded


def register(registry: HandlerRegistry) -> None:
    path = os.environ.get(HISTORY_FILE_ENV)
    worker = os.environ.get("JOBS_WORKER_ID", f"pid-{os.getpid()}")
    handlers = ChaosHandlers(HistoryWriter(Path(path), f"handler:{worker}") if path else None)
    policy: dict[str, Any] = {
        "max_attempts": MAX_ATTEMPTS,
        "backoff_base_seconds": BACKOFF_BASE_SECONDS,
        "backoff_cap_seconds": BACKOFF_CAP_SECONDS,
    }
    registry.register(QUICK, **policy)(handlers.recorded(handlers.quick))
    registry.register(FLAKY, **policy)(handlers.recorded(handlers.flaky))
    registry.register(INTENT, external_side_effects=True, **policy)(handlers.recorded(handlers.intent))
    registry.register(LONG, **policy)(handlers.recorded(handlers.long))
    registry.register(LIMITED, **policy)(handlers.recorded(handlers.sleeping))
    registry.register(PAUSABLE, **policy)(handlers.recorded(handlers.quick))
    registry.register(BLOCKING, **policy)(handlers.blocking)
