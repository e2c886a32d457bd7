"""Group commit: concurrent single submissions share one transaction, so one COMMIT (one WAL flush)
acknowledges everything that arrived while the previous transaction was running. Nobody waits for a
timer: at low load a submission runs alone, at once; under load a flusher lets a few more turns of the
event loop bring in the calls already on their way before it takes its batch.

Each transaction is bounded by the latest deadline among the callers it carries (database.call_deadline),
so no caller's flush outlives everyone waiting for it; a flush that has not ended after STALL_SECONDS
lets another flusher take the next batch on another connection, so a hung connection holds up only the
submissions already in its transaction."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared.domain.errors import DatabaseUnreachable, DeadlineExceeded, JobsError
from shared.storage.database import Connection, Database, call_deadline_at, current_call_deadline

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
# A flush takes milliseconds; one still running after this long is stuck (a lock, a database that stopped
# answering), and the submissions behind it go to another flusher rather than wait for it.
STALL_SECONDS_DEFAULT = 0.5

# Runs a group's items in one open transaction; per item a result, or the domain error refusing
# that item alone. Database errors must propagate: they roll the whole group back.
BatchWork = Callable[[Connection, Sequence[K]], Awaitable[list["T | JobsError"]]]
# Told of each committed group (its requests and their outcomes) before any caller is answered, whether or
# not the callers still wait: what must follow a commit (its log lines) happens once, here.
Committed = Callable[[Sequence[K], Sequence["T | JobsError"]], None]


@dataclass
class _Flush:
    stalled: bool = False


@dataclass
class _Item(Generic[K, T]):
    request: K
    outcome: asyncio.Future[T]
    # Monotonic time by which the caller stops waiting (database.call_deadline); None: it set none.
    deadline: float | None


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
        stall_seconds: float = STALL_SECONDS_DEFAULT,
        committed: Committed[K, T] | None = None,
    ) -> None:
        self._db = db
        self._work = work
        self._committed = committed
        self._stall_seconds = stall_seconds
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
        # Flushers whose current flush has run past stall_seconds.
        self._stalled = 0

    async def run(self, request: K) -> T:
        """Returns once the transaction that carried `request` committed, or raises its refusal."""
        item: _Item[K, T] = _Item(request, asyncio.get_running_loop().create_future(), current_call_deadline())
        # A caller that stopped waiting leaves its outcome unread: read here, asyncio reports no "exception
        # was never retrieved" for it.
        item.outcome.add_done_callback(_retrieve)
        self._pending.append(item)
        # One flusher while it keeps up: what arrives during its transaction rides in the next one, so
        # batches grow with the load. Another starts only when a whole batch is already waiting, or when a
        # flush stalls. (A flusher per arrival, up to the maximum, kept four transactions of one submission
        # each going: 1.04 jobs per COMMIT from 64 callers, and the API's CPU spent on transactions, not jobs.)
        if self._wants_flusher():
            self._start_flusher()
        return await asyncio.shield(item.outcome)

    def _wants_flusher(self) -> bool:
        if self._draining == 0:
            return True
        if self._draining >= self._flushers_max:
            return False
        return len(self._pending) >= self._batch_max or self._stalled >= self._draining

    def _start_flusher(self) -> None:
        self._draining += 1
        # Detached from the caller: a caller that goes away must not abort the others' transaction. A fresh
        # context too: each flush sets the deadline of the callers it carries, not of whoever started it.
        task = asyncio.create_task(self._drain(), context=contextvars.Context())
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    def _stall(self, flush: _Flush) -> None:
        """A flush ran past stall_seconds: what waits behind it, or arrives while it lasts, gets a flusher of
        its own."""
        flush.stalled = True
        self._stalled += 1
        if self._pending and self._wants_flusher():
            self._start_flusher()

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                if self._overlapping:
                    await self._gather()
                # Another flusher may have taken everything meanwhile: the loop's test then ends the drain.
                batch = self._take()
                if batch:
                    self._overlapping = len(batch) > 1
                    flush = _Flush()
                    timer = loop.call_later(self._stall_seconds, self._stall, flush)
                    try:
                        await self._flush(batch)
                    finally:
                        timer.cancel()
                        if flush.stalled:
                            self._stalled -= 1
        finally:
            # No await between the empty queue seen above and this: whoever queues next sees the count.
            self._draining -= 1

    def _take(self) -> list[_Item[K, T]]:
        """The next batch, without the submissions whose callers' deadlines have passed: nobody waits for
        those any more, and nothing of them was written."""
        now = time.monotonic()
        batch: list[_Item[K, T]] = []
        while self._pending and len(batch) < self._batch_max:
            item = self._pending.popleft()
            if item.deadline is not None and item.deadline <= now:
                _resolve([item], [DeadlineExceeded("the caller's deadline passed before its submission was written")])
            else:
                batch.append(item)
        return batch

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + self._gather_seconds
        for _ in range(self._gather_turns):
            if len(self._pending) >= self._batch_max or loop.time() >= until:
                return
            await asyncio.sleep(0)

    async def _flush(self, batch: list[_Item[K, T]]) -> None:
        body_done = False
        requests = [item.request for item in batch]
        try:
            with call_deadline_at(_latest_deadline(batch)):
                async with self._db.transaction() as conn:
                    results = await self._work(conn, requests)
                    body_done = True
        except JobsError as error:
            if body_done or len(batch) == 1 or isinstance(error, DatabaseUnreachable | DeadlineExceeded):
                # The COMMIT itself failed, so nobody can know whether it happened; or the database failed
                # rather than one item's statement, and alone each would only wait for it again. Either
                # way every caller gets the indeterminate answer and resubmits.
                _resolve(batch, [error] * len(batch))
            else:
                await self._flush_each_alone(batch)
            return
        except Exception as error:  # noqa: BLE001 - a bug answers its callers (INTERNAL), not the flusher
            _resolve(batch, [error] * len(batch))
            return
        except BaseException as error:
            _resolve(batch, [error] * len(batch))
            raise
        if self._committed is not None:
            self._committed(requests, results)
        _resolve(batch, results)

    async def _flush_each_alone(self, batch: list[_Item[K, T]]) -> None:
        """After a statement failed and the group rolled back (nothing was written): each item on its own,
        within its own caller's deadline, to meet its own fate. A statement's failure, a refused row or
        a connection lost under it (a statement fault injected on purpose is one), is the group's and
        not the next transaction's. Once the database itself fails (no connection in time, one that
        stopped answering), the items not yet run are answered at once: alone, each would only wait for
        it again, one after another, past its caller's deadline."""
        for position, item in enumerate(batch):
            if item.deadline is not None and item.deadline <= time.monotonic():
                _resolve([item], [DeadlineExceeded("the caller's deadline passed before its retry")])
                continue
            await self._flush([item])
            failure = _failure_of(item)
            if isinstance(failure, DatabaseUnreachable):
                rest = batch[position + 1 :]
                _resolve(rest, [failure] * len(rest))
                return


def _failure_of(item: _Item[Any, Any]) -> BaseException | None:
    if not item.outcome.done() or item.outcome.cancelled():
        return None
    return item.outcome.exception()


async def each_alone(conn: Connection, works: Sequence[Callable[[Connection], Awaitable[T]]]) -> list[T | JobsError]:
    """BatchWork for independent closures: runs them one after another in the shared transaction."""
    results: list[T | JobsError] = []
    for work in works:
        try:
            results.append(await work(conn))
        except JobsError as error:
            results.append(error)
    return results


def _latest_deadline(batch: Sequence[_Item[K, T]]) -> float | None:
    """The flush serves its callers as long as any of them waits: until the latest deadline, or without
    one (the database's own bound) when some caller set none."""
    deadlines = [item.deadline for item in batch]
    return None if None in deadlines else max(d for d in deadlines if d is not None)


def _retrieve(outcome: asyncio.Future[Any]) -> None:
    if not outcome.cancelled():
        outcome.exception()


def _resolve(batch: list[_Item[K, T]], results: Sequence[T | BaseException]) -> None:
    for item, result in zip(batch, results, strict=True):
        if item.outcome.done():
            continue
        if isinstance(result, BaseException):
            item.outcome.set_exception(result)
        else:
            item.outcome.set_result(result)
