"""A handler's stop signal: its events are made on first wait, so every order of set and wait must work."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shared.handlers.api import StopSignal

pytestmark = pytest.mark.timeout(10)


async def test_a_wait_begun_after_the_stop_returns_at_once() -> None:
    signal = StopSignal()
    signal.set()

    assert signal.is_set()
    assert await asyncio.wait_for(signal.wait(), 1) is True


async def test_a_stop_wakes_a_coroutine_already_waiting() -> None:
    signal = StopSignal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    assert not waiter.done()

    signal.set()

    assert await asyncio.wait_for(waiter, 1) is True


async def test_a_stop_wakes_a_thread_blocked_on_it_and_one_that_asks_later() -> None:
    signal = StopSignal()
    blocked = threading.Event()
    answers: list[bool] = []

    def wait_in_thread() -> None:
        blocked.set()
        answers.append(signal.wait_blocking(5))

    thread = threading.Thread(target=wait_in_thread)
    thread.start()
    await asyncio.to_thread(blocked.wait, 5)
    signal.set()
    await asyncio.to_thread(thread.join, 5)

    assert answers == [True]
    assert signal.wait_blocking(0) is True


def test_an_unstopped_signal_times_out_when_waited_on_from_a_thread() -> None:
    assert StopSignal().wait_blocking(0.01) is False
