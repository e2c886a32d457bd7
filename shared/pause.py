"""The pause between turns of a background loop that must end when its task is cancelled.

On Python 3.11, `asyncio.wait_for` returns its result and drops a cancel that arrives just as the awaited
future completes (fixed in 3.12, where it is built on `asyncio.timeout`); psycopg_pool waits for a
connection with it. A loop whose turn swallowed its cancel that way went on to its next sleep, and a
replica asked to stop waited a whole interval for it (a worker's retention loop: minutes; seen as an
in-process worker that did not stop within 15 s). The task still counts the request
(`Task.cancelling()`), so the pause raises it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib


async def pause(seconds: float) -> None:
    """Sleeps `seconds`, unless this task was asked to stop: then raises CancelledError at once."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(seconds)


async def wait_at_most(event: asyncio.Event, seconds: float | None) -> bool:
    """Waits until `event` is set or `seconds` passed (None: no bound); whether it was set. Built on
    `asyncio.timeout`, which keeps a cancel that 3.11's `wait_for` may drop."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
