"""Gathers completions for a moment and sends them in one CompleteJobs call (one SQL statement)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from shared.domain.jobs import Completion, ReportOutcome, child_size
from worker_service.api_client import ApiClient, ApiUnreachable

log = logging.getLogger(__name__)
# Results (and the jobs they spawned) in one call: under the API's gRPC message limit (4 MiB at least)
# with room for the rest of the call. A completion larger than this on its own goes alone (the API's limit
# grows with its result limit).
BATCH_BYTES_MAX = 3 * 1024 * 1024


@dataclass
class _Pending:
    completion: Completion
    # Monotonic time after which the lease has surely run out and retrying is pointless.
    deadline: float
    outcome: asyncio.Future[ReportOutcome]

    @property
    def size(self) -> int:
        # A completion's spawned jobs travel with it (at most CHILDREN_BYTES_MAX of them).
        return len(self.completion.result) + sum(child_size(c.job) for c in self.completion.children)


class CompletionBatcher:
    def __init__(
        self, api: ApiClient, *, flush_seconds: float, batch_max: int, batch_bytes_max: int = BATCH_BYTES_MAX
    ) -> None:
        self._api = api
        self._flush_seconds = flush_seconds
        self._batch_max = batch_max
        self._batch_bytes_max = batch_bytes_max
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        # Taken from the queue, but it would have made the last batch too large: it opens the next.
        self._carried: _Pending | None = None

    async def complete(self, completion: Completion, *, deadline: float) -> ReportOutcome:
        """Resolves with the API's verdict; raises ApiUnreachable when it never answered in time."""
        pending = _Pending(completion, deadline, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(pending)  # unbounded: never waits
        return await pending.outcome

    async def run(self) -> None:
        """Flushes on count, on bytes or after a short window, whichever comes first; cancelled at shutdown."""
        while True:
            first = self._carried or await self._queue.get()
            self._carried = None
            batch, size = [first], first.size
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
            await self._flush(batch)

    async def _next(self, window_ends: float) -> _Pending | None:
        """What is queued already is taken at once; only an empty queue waits, for the window's rest."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        remaining = window_ends - time.monotonic()
        if remaining <= 0:
            return None
        try:
            return await asyncio.wait_for(self._queue.get(), remaining)
        except TimeoutError:
            return None

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
