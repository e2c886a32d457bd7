"""Group commit: concurrent single submissions share one transaction, so one COMMIT (one WAL flush)
acknowledges everything that arrived while the previous transaction was running. Nobody waits for a
timer: at low load a submission runs alone, at once; under load a flusher lets a few more turns of the
event loop bring in the calls already on their way before it takes its batch."""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.domain.errors import JobsError
from shared.storage.database import Connection, Database

K = TypeVar("K")
T = TypeVar("T")
BATCH_MAX_DEFAULT = 256
FLUSHERS_DEFAULT = 4
# Under load (the last batch held more than one submission), a flusher lets the event loop run up to this
# many turns, for at most this long, before it takes its batch. A call gRPC has accepted reaches its
# handler over several turns; those on their way in then share this transaction instead of each paying
# for the next one. The turns are short when little is arriving and long when much is, so the wait
# follows the load, and the time bounds it. From 64 callers on two cores: 5 -> 12 jobs per COMMIT, the
# API's CPU per call 504 -> 381 us, PostgreSQL's 110 -> 62 us (docs/PERFORMANCE.md).
GATHER_TURNS_DEFAULT = 32
GATHER_SECONDS_DEFAULT = 0.004

# Runs a group's items in one open transaction; per item a result, or the domain error refusing
# that item alone. Database errors must propagate: they roll the whole group back.
BatchWork = Callable[[Connection, Sequence[K]], Awaitable[list["T | JobsError"]]]


@dataclass
class _Item(Generic[K, T]):
    request: K
    outcome: asyncio.Future[T]


class GroupCommitter(Generic[K, T]):
    def __init__(
        self,
        db: Database,
        work: BatchWork[K, T],
        *,
        batch_max: int = BATCH_MAX_DEFAULT,
        flushers: int = FLUSHERS_DEFAULT,
        gather_turns: int = GATHER_TURNS_DEFAULT,
        gather_seconds: float = GATHER_SECONDS_DEFAULT,
    ) -> None:
        self._db = db
        self._work = work
        self._batch_max = batch_max
        self._gather_turns = gather_turns
        self._gather_seconds = gather_seconds
        self._flushers_max = flushers
        self._pending: deque[_Item[K, T]] = deque()
        # Flushers that will still look at the queue. A task's done callback runs a loop turn after
        # the task returned, so the task set alone would count flushers that have already stopped
        # looking: a submission arriving in between would be queued with nobody left to take it.
        self._draining = 0
        self._flushers: set[asyncio.Task[None]] = set()
        # Whether the last batch held more than one submission: only then are others likely on their way.
        self._overlapping = False

    async def run(self, request: K) -> T:
        """Returns once the transaction that carried `request` committed, or raises its refusal."""
        item: _Item[K, T] = _Item(request, asyncio.get_running_loop().create_future())
        self._pending.append(item)
        # One flusher while it keeps up: what arrives during its transaction rides in the next one, so
        # batches grow with the load. Another starts only when a whole batch is already waiting. (A
        # flusher per arrival, up to the maximum, kept four transactions of one submission each going:
        # 1.04 jobs per COMMIT from 64 callers, and the API's CPU spent on transactions, not jobs.)
        if self._draining == 0 or (self._draining < self._flushers_max and len(self._pending) >= self._batch_max):
            self._draining += 1
            # Detached from the caller: a caller that goes away must not abort the others' transaction.
            # A fresh context too: the first caller's deadline (database.call_deadline) must not bound the
            # transactions this task runs for everyone after it.
            task = asyncio.create_task(self._drain(), context=contextvars.Context())
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await asyncio.shield(item.outcome)

    async def _drain(self) -> None:
        try:
            while self._pending:
                if self._overlapping:
                    await self._gather()
                # Another flusher may have taken everything meanwhile: the loop's test then ends the drain.
                batch = [self._pending.popleft() for _ in range(min(self._batch_max, len(self._pending)))]
                if batch:
                    self._overlapping = len(batch) > 1
                    await self._flush(batch)
        finally:
            # No await between the empty queue seen above and this: whoever queues next sees the count.
            self._draining -= 1

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self._gather_seconds
        for _ in range(self._gather_turns):
            if len(self._pending) >= self._batch_max or loop.time() >= until:
                return
            await asyncio.sleep(0)

    async def _flush(self, batch: list[_Item[K, T]]) -> None:
        body_done = False
        try:
            async with self._db.transaction() as conn:
                results = await self._work(conn, [item.request for item in batch])
                body_done = True
        except JobsError as error:
            if body_done or len(batch) == 1:
                # The COMMIT itself failed: nobody can know whether it happened (indeterminate).
                _resolve(batch, [error] * len(batch))
            else:
                # A statement failed and the transaction rolled back: nothing was written, so each
                # item can safely run on its own and meet its own fate.
                for item in batch:
                    await self._flush([item])
            return
        except BaseException as error:
            _resolve(batch, [error] * len(batch))
            raise
        _resolve(batch, results)


async def each_alone(conn: Connection, works: Sequence[Callable[[Connection], Awaitable[T]]]) -> list[T | JobsError]:
    """BatchWork for independent closures: runs them one after another in the shared transaction."""
    results: list[T | JobsError] = []
    for work in works:
        try:
            results.append(await work(conn))
        except JobsError as error:
            results.append(error)
    return results


def _resolve(batch: list[_Item[K, T]], results: Sequence[T | BaseException]) -> None:
    for item, result in zip(batch, results, strict=True):
        if item.outcome.done():
            continue
        if isinstance(result, BaseException):
            item.outcome.set_exception(result)
        else:
            item.outcome.set_result(result)
