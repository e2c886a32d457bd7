"""Gathers completions for a moment and sends them in one CompleteJobs call (one SQL statement), with
several calls in flight at once."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from shared.domain.jobs import Completion, ReportOutcome, child_size
from worker_service.api_client import ApiClient, ApiUnreachable

log = logging.getLogger(__name__)
# Results (and the jobs they spawned) in one call: under the API's gRPC message limit (4 MiB at least)
# with room for the rest of the call. A completion larger than this on its own goes alone (the API's limit
# grows with its result limit).
BATCH_BYTES_MAX = 3 * 1024 * 1024
# CompleteJobs calls in flight at once (JOBS_COMPLETION_CALLS_MAX). With one, completions that arrive
# while a call travels wait for its answer before theirs can leave: at a hundred slots most of a job's
# cycle was that wait. A few calls keep the API's group commit fed without a call per completion.
CALLS_MAX_DEFAULT = 4
# Told the API's verdict on one completion, or why none came, once; on the event loop, and it must not raise.
Answer = Callable[[ReportOutcome | ApiUnreachable], None]


@dataclass(slots=True)
class _Pending:
    completion: Completion
    # Monotonic time after which the lease has surely run out and retrying is pointless.
    deadline: float
    answer: Answer

    @property
    def size(self) -> int:
        # A completion's spawned jobs travel with it (at most CHILDREN_BYTES_MAX of them).
        children = self.completion.children
        return len(self.completion.result) + (sum(child_size(c.job) for c in children) if children else 0)


class CompletionBatcher:
    def __init__(
        self,
        api: ApiClient,
        *,
        flush_seconds: float,
        batch_max: int,
        batch_bytes_max: int = BATCH_BYTES_MAX,
        calls_max: int = CALLS_MAX_DEFAULT,
    ) -> None:
        self._api = api
        self._flush_seconds = flush_seconds
        self._batch_max = batch_max
        self._batch_bytes_max = batch_bytes_max
        # Unbounded, filled and emptied on the event loop: a deque and an event, where asyncio.Queue's
        # put and get were a few Python calls each per job.
        self._queued: collections.deque[_Pending] = collections.deque()
        self._arrived = asyncio.Event()
        # Taken from the queue, but it would have made the last batch too large: it opens the next.
        self._carried: _Pending | None = None
        self._gathering: list[_Pending] = []
        # A call's place is taken before its batch is gathered: while every call is out, completions
        # gather in the queue, and the next call takes as many of them as a batch holds.
        self._calls = asyncio.Semaphore(calls_max)
        self._in_flight: set[asyncio.Task[None]] = set()

    async def complete(self, completion: Completion, *, deadline: float) -> ReportOutcome:
        """Resolves with the API's verdict; raises ApiUnreachable when it never answered in time."""
        outcome: asyncio.Future[ReportOutcome] = asyncio.get_running_loop().create_future()

        def answer(verdict: ReportOutcome | ApiUnreachable) -> None:
            if outcome.done():
                return
            if isinstance(verdict, ApiUnreachable):
                outcome.set_exception(verdict)
            else:
                outcome.set_result(verdict)

        self.submit(completion, deadline=deadline, answer=answer)
        return await outcome

    def submit(self, completion: Completion, *, deadline: float, answer: Answer) -> None:
        """Queues the completion; `answer` hears the verdict, or ApiUnreachable when none came in time
        (the batcher stopped included). Nothing waits: a job's task can end here, no future of its own."""
        self._queued.append(_Pending(completion, deadline, answer))
        self._arrived.set()

    async def run(self) -> None:
        """Flushes on count, on bytes or after a short window, whichever comes first, up to `calls_max`
        calls at once. Cancelled at shutdown (after the drain, whose jobs waited for their answers):
        a call still out then is cancelled too, and its completions' waiters hear ApiUnreachable."""
        try:
            while True:
                await self._calls.acquire()
                try:
                    batch = await self._gather()
                except BaseException:
                    self._calls.release()
                    raise
                call = asyncio.create_task(self._flush(batch), name="complete-jobs")
                self._in_flight.add(call)
                call.add_done_callback(self._call_done)
        finally:
            calls = list(self._in_flight)
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            self._fail_unsent(ApiUnreachable("the worker stopped before the completion was sent"))

    def _fail_unsent(self, failure: ApiUnreachable) -> None:
        """Nobody waits forever: what was gathered, carried or queued but never sent fails."""
        unsent = [*self._gathering, *([self._carried] if self._carried else []), *self._queued]
        self._queued.clear()
        self._gathering, self._carried = [], None
        for pending in unsent:
            pending.answer(failure)

    def _call_done(self, call: asyncio.Task[None]) -> None:
        self._in_flight.discard(call)
        self._calls.release()

    async def _gather(self) -> list[_Pending]:
        first = self._carried or await self._take()
        self._carried = None
        # Kept where a cancel in the middle finds it (_fail_unsent).
        self._gathering = batch = [first]
        size = first.size
        window_ends = time.monotonic() + self._flush_seconds
        while len(batch) < self._batch_max:
            following = await self._next(window_ends)
            if following is None:
                break
            if size + following.size > self._batch_bytes_max:
                self._carried = following
                break
            batch.append(following)
            size += following.size
        self._gathering = []
        return batch

    async def _next(self, window_ends: float) -> _Pending | None:
        """What is queued already is taken at once; only an empty queue waits, for the window's rest."""
        if self._queued:
            return self._queued.popleft()
        remaining = window_ends - time.monotonic()
        if remaining <= 0:
            return None
        try:
            async with asyncio.timeout(remaining):  # not wait_for, which may drop a cancel on 3.11
                return await self._take()
        except TimeoutError:
            return None

    async def _take(self) -> _Pending:
        """The next completion, waiting for one. Taken in the same step as the wait ends: a timeout or
        a cancel can only come while nothing is taken."""
        while not self._queued:
            self._arrived.clear()
            await self._arrived.wait()
        return self._queued.popleft()

    async def _flush(self, batch: list[_Pending]) -> None:
        deadline = max(p.deadline for p in batch)
        try:
            outcomes = await self._api.complete_many([p.completion for p in batch], deadline=deadline)
        except BaseException as exc:  # noqa: BLE001 - each waiter must hear about the failure, a cancel too
            failure = exc if isinstance(exc, ApiUnreachable) else ApiUnreachable(str(exc) or type(exc).__name__)
            for pending in batch:
                pending.answer(failure)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for pending, outcome in zip(batch, outcomes, strict=True):
            pending.answer(outcome)
