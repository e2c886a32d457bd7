"""The worker's completion batcher keeps several CompleteJobs calls in flight, gathers what arrives while
they are all out into the next one, and never leaves a completion's waiter without an answer."""

from __future__ import annotations

import asyncio
import time
from typing import cast

import pytest

from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import Completion, ReportOutcome
from worker_service.api_client import ApiClient, ApiUnreachable
from worker_service.completion_batcher import CompletionBatcher

pytestmark = pytest.mark.timeout(10)


class _HeldCalls:
    """Stands in for the API: each CompleteJobs call waits until the test answers it."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._answers: list[asyncio.Event] = []
        self._made = asyncio.Condition()

    async def complete_many(self, completions: list[Completion], *, deadline: float) -> list[ReportOutcome]:
        answer = asyncio.Event()
        async with self._made:
            self.calls.append([c.job_id for c in completions])
            self._answers.append(answer)
            self._made.notify_all()
        await answer.wait()
        return [ReportOutcome.ACCEPTED] * len(completions)

    async def made(self, count: int) -> None:
        async with self._made:
            await self._made.wait_for(lambda: len(self.calls) >= count)

    def answer(self, call: int) -> None:
        self._answers[call].set()


def _complete(batcher: CompletionBatcher, job_id: str) -> asyncio.Task[ReportOutcome]:
    completion = Completion(JobId(job_id), FencingToken(1), b"")
    return asyncio.create_task(batcher.complete(completion, deadline=time.monotonic() + 30))


async def _settle() -> None:
    """Lets every task that can run do so, as far as it can go without an outside event."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_calls_overlap_up_to_the_bound_and_what_arrives_meanwhile_leaves_in_one_call() -> None:
    api = _HeldCalls()
    batcher = CompletionBatcher(cast(ApiClient, api), flush_seconds=0.0, batch_max=100, calls_max=2)
    runner = asyncio.create_task(batcher.run())
    try:
        first = _complete(batcher, "a")
        await api.made(1)
        second = _complete(batcher, "b")
        await api.made(2)  # sent while the first call is still out
        later = [_complete(batcher, "c"), _complete(batcher, "d")]
        await _settle()
        assert api.calls == [["a"], ["b"]], "a third call went out past the bound"

        api.answer(0)
        assert await first is ReportOutcome.ACCEPTED
        await api.made(3)
        assert api.calls[2] == ["c", "d"]
        api.answer(1)
        api.answer(2)
        assert [await second, *[await t for t in later]] == [ReportOutcome.ACCEPTED] * 3
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_a_stopped_batcher_answers_every_waiter_sent_or_not() -> None:
    api = _HeldCalls()
    batcher = CompletionBatcher(cast(ApiClient, api), flush_seconds=0.0, batch_max=100, calls_max=1)
    runner = asyncio.create_task(batcher.run())
    in_flight = _complete(batcher, "a")
    await api.made(1)
    queued = _complete(batcher, "b")
    await _settle()

    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    for waiter in (in_flight, queued):
        with pytest.raises(ApiUnreachable):
            await waiter
    assert api.calls == [["a"]]
