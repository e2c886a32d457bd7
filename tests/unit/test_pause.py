"""A background loop's pause ends the loop when its task was asked to stop, even after a turn that
swallowed the cancel (as `asyncio.wait_for` may on Python 3.11), and waits on an event keep the cancel."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shared.pause import pause, wait_at_most

pytestmark = pytest.mark.timeout(30)


async def test_a_pause_after_a_turn_that_swallowed_the_cancel_raises_it_at_once() -> None:
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            turns += 1
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(60)  # a turn's work, whose wait lost the cancel
            await pause(60)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert turns == 1


async def test_a_pause_sleeps_when_no_stop_was_asked() -> None:
    started = asyncio.get_running_loop().time()
    await pause(0.05)
    assert asyncio.get_running_loop().time() - started >= 0.05


async def test_wait_at_most_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await wait_at_most(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_at_most(event, 10) is True
    assert await wait_at_most(event, None) is True


async def test_wait_at_most_keeps_a_cancel_that_arrives_as_the_event_is_set() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(wait_at_most(event, 60))
    await asyncio.sleep(0)
    event.set()
    task.cancel()  # in the same turn as the set: 3.11's wait_for returned True here and dropped it
    with pytest.raises(asyncio.CancelledError):
        await task
