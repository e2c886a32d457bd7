"""Gathers completions for a moment and sends them in one CompleteJobs call (one SQL statement)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from shared.domain.jobs import Completion, ReportOutcome
from worker_service.api_client import ApiClient, ApiUnreachable

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    completion: Completion
    # Monotonic time after which the lease has surely run out and retrying is pointless.
    deadline: float
    outcome: asyncio.Future[ReportOutcome]


class CompletionBatcher:
    def __init__(self, api: ApiClient, *, flush_seconds: float, batch_max: int) -> None:
        self._api = api
        self._flush_seconds = flush_seconds
        self._batch_max = batch_max
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()

    async def complete(self, completion: Completion, *, deadline: float) -> ReportOutcome:
        """Resolves with the API's verdict; raises ApiUnreachable when it never answered in time."""
        pending = _Pending(completion, deadline, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(pending)  # unbounded: never waits
        return await pending.outcome

    async def run(self) -> None:
        """Flushes on size or after a short window, whichever comes first; cancelled at shutdown."""
        while True:
            batch = [await self._queue.get()]
            window_ends = time.monotonic() + self._flush_seconds
            while len(batch) < self._batch_max:
                # What is queued already is taken at once; only an empty queue waits, for the window's rest.
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                remaining = window_ends - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except TimeoutError:
                    break
            await self._flush(batch)

    async def _flush(self, batch: list[_Pending]) -> None:
        deadline = max(p.deadline for p in batch)
        try:
            outcomes = await self._api.complete_many([p.completion for p in batch], deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - each waiter must hear about the failure
            for pending in batch:
                if not pending.outcome.done():
                    pending.outcome.set_exception(exc if isinstance(exc, ApiUnreachable) else ApiUnreachable(str(exc)))
            return
        for pending, outcome in zip(batch, outcomes, strict=True):
            if not pending.outcome.done():
                pending.outcome.set_result(outcome)
