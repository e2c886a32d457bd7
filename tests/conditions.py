"""Bounded waits on conditions, in place of sleeping and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

POLL_INTERVAL_SECONDS = 0.01


async def wait_until(condition: Callable[[], bool], *, within_seconds: float = 5.0, what: str = "it") -> None:
    """Polls `condition`, letting other tasks run in between, until it holds; fails the test after
    `within_seconds`. For conditions only another process can signal (a backend waiting on a lock)."""
    try:
        async with asyncio.timeout(within_seconds):
            # No event can carry a condition held in another process; polling it is the signal.
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(POLL_INTERVAL_SECONDS)
    except TimeoutError:
        raise AssertionError(f"timed out after {within_seconds}s waiting for {what}") from None
