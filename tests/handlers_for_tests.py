"""Job kinds that misbehave on purpose, loaded by the end-to-end tests through JOBS_HANDLER_MODULES."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from shared.handlers import HandlerRegistry, JobContext, RetryableError

HANG_SECONDS = 6
TRACED_KIND = "traced"
STALL_SECONDS_MAX = 60


def register(registry: HandlerRegistry) -> None:
    registry.register("poison.exit", max_attempts=3, backoff_base_seconds=0.1)(poison_exit)
    registry.register("poison.hang", max_attempts=2, backoff_base_seconds=0.1)(poison_hang)
    registry.register("charge", max_attempts=3, external_side_effects=True, backoff_base_seconds=0.1)(charge)
    registry.register("slow.external", timeout_seconds=0.5, external_side_effects=True)(slow)
    registry.register("slow.internal", timeout_seconds=0.5, max_attempts=2, backoff_base_seconds=0.1)(slow)
    registry.register("slow.after_intent", timeout_seconds=0.5, max_attempts=2, backoff_base_seconds=0.1)(
        slow_after_intent
    )
    registry.register("crash.once", backoff_base_seconds=0.1)(crash_once)
    registry.register("quick.flaky", max_attempts=3, backoff_base_seconds=0.1)(quick_flaky)
    registry.register(TRACED_KIND, max_attempts=3, backoff_base_seconds=0.1)(traced)
    registry.register("stall.first", backoff_base_seconds=0.1)(stall_first)


async def poison_exit(ctx: JobContext) -> bytes:
    """Kills its worker, as a segfaulting native library would."""
    os._exit(17)


async def poison_hang(ctx: JobContext) -> bytes:
    """Blocks the event loop, so its worker stops heartbeating and its lease runs out."""
    time.sleep(HANG_SECONDS)  # noqa: ASYNC251 - blocking the loop is the point
    return b"too late"


async def stall_first(ctx: JobContext) -> bytes:
    """Attempt 1 freezes its worker (the event loop blocks: no heartbeats, nothing else runs) until the
    file named by the payload exists, then returns; later attempts return at once."""
    if ctx.attempt == 1:
        release = Path(ctx.payload.decode())
        deadline = time.monotonic() + STALL_SECONDS_MAX
        while not release.exists() and time.monotonic() < deadline:  # noqa: ASYNC240 - as above
            time.sleep(0.05)  # noqa: ASYNC251 - blocking the loop is the point
    return b"attempt %d" % ctx.attempt


async def charge(ctx: JobContext) -> bytes:
    """Charges a card once. Attempt 1 dies after sending the charge; a later attempt reconciles from the
    receipts instead of charging again."""
    earlier = [r for r in await ctx.earlier_receipts() if r.step == "charge"]
    if earlier:
        await ctx.record_intent("charge", b"reconcile")
        await ctx.confirm("charge", b"found existing charge " + earlier[0].intent)
        return b"reconciled:" + earlier[0].intent
    await ctx.record_intent("charge", b"ch_" + ctx.job_id[:8].encode())
    os._exit(18)


async def slow(ctx: JobContext) -> bytes:
    await asyncio.sleep(30)
    return b"never"


async def slow_after_intent(ctx: JobContext) -> bytes:
    """Sends an external call (intent recorded) whose answer never comes within the kind's timeout."""
    await ctx.record_intent("notify", b"request")
    await asyncio.sleep(30)
    return b"never"


async def crash_once(ctx: JobContext) -> bytes:
    """An unclassified exception: retryable by contract."""
    if ctx.attempt == 1:
        raise ValueError("unexpected input on first attempt")
    return b"ok on attempt %d" % ctx.attempt


async def quick_flaky(ctx: JobContext) -> bytes:
    spec = json.loads(ctx.payload or b"{}")
    if ctx.attempt <= spec.get("fail_times", 0):
        raise RetryableError(f"attempt {ctx.attempt} failed")
    return ctx.payload


async def traced(ctx: JobContext) -> bytes:
    """Fails its first `fail_times` attempts, then answers with the trace context it was handed."""
    spec = json.loads(ctx.payload or b"{}")
    if ctx.attempt <= spec.get("fail_times", 0):
        raise RetryableError(f"attempt {ctx.attempt} failed")
    return json.dumps({"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}).encode()
