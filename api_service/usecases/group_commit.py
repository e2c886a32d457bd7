"""Group commit: concurrent single submissions share one transaction, so one COMMIT (one WAL flush)
acknowledges everything that arrived while the previous transaction was running. Nobody waits for a
timer: at low load a submission runs alone, at once."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.domain.errors import JobsError
from shared.storage.database import Connection, Database

T = TypeVar("T")
BATCH_MAX_DEFAULT = 256
FLUSHERS_DEFAULT = 4


@dataclass
class _Item(Generic[T]):
    work: Callable[[Connection], Awaitable[T]]
    outcome: asyncio.Future[T]


class GroupCommitter(Generic[T]):
    def __init__(self, db: Database, *, batch_max: int = BATCH_MAX_DEFAULT, flushers: int = FLUSHERS_DEFAULT):
        self._db = db
        self._batch_max = batch_max
        self._flushers_max = flushers
        self._pending: deque[_Item[T]] = deque()
        self._flushers: set[asyncio.Task] = set()

    async def run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Runs `work` inside a shared transaction and returns once that transaction committed.
        `work` may raise domain errors (only its own caller sees them); it must not swallow
        database errors."""
        item = _Item(work, asyncio.get_running_loop().create_future())
        self._pending.append(item)
        if len(self._flushers) < self._flushers_max:
            # Detached from the caller: a caller that goes away must not abort the others' transaction.
            task = asyncio.create_task(self._drain())
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await asyncio.shield(item.outcome)

    async def _drain(self) -> None:
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(self._batch_max, len(self._pending)))]
            await self._flush(batch)

    async def _flush(self, batch: list[_Item[T]]) -> None:
        results: list[T | JobsError] = []
        body_done = False
        try:
            async with self._db.transaction() as conn:
                for item in batch:
                    try:
                        results.append(await item.work(conn))
                    except JobsError as error:  # a refusal of this item only; the transaction is intact
                        results.append(error)
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


def _resolve(batch: list[_Item], results: list) -> None:
    for item, result in zip(batch, results, strict=True):
        if item.outcome.done():
            continue
        if isinstance(result, BaseException):
            item.outcome.set_exception(result)
        else:
            item.outcome.set_result(result)
