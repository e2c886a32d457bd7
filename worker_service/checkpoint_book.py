"""A running attempt's stage checkpoints, recorded through the API's fenced RecordCheckpoint."""

from __future__ import annotations

import asyncio
import threading
import time

from durable_jobs.handlers import RetryableError
from shared.domain.checkpoints import Checkpoint
from shared.domain.errors import LeaseLost
from shared.domain.jobs import LeaseRef, ReportOutcome
from worker_service.api_client import ApiClient, ApiUnreachable


class ApiCheckpointBook:
    """Made on the worker's event loop (`loop`, when the caller has it at hand); `record_blocking` hops onto
    that loop from a handler's thread."""

    def __init__(
        self,
        api: ApiClient,
        lease: LeaseRef,
        *,
        report_seconds: float,
        loop: asyncio.AbstractEventLoop | None = None,
        loop_thread: int | None = None,
    ) -> None:
        self._api = api
        self._lease = lease
        self._report_seconds = report_seconds
        self._loop = loop or asyncio.get_running_loop()
        # The loop's thread: the caller's unless said (a book made in a handler's thread says it).
        self._loop_thread = loop_thread or threading.get_ident()

    async def record(self, stage: str, data: bytes) -> Checkpoint:
        try:
            stored = await self._api.record_checkpoint(
                self._lease, stage, data, deadline=time.monotonic() + self._report_seconds
            )
        except ApiUnreachable as exc:
            # The stage's output is durable, only its record is missing: the next attempt redoes the stage.
            raise RetryableError(f"checkpoint {stage[:64]!r} not recorded: {exc}") from None
        if isinstance(stored, ReportOutcome):
            raise LeaseLost(f"checkpoint refused: {stored.value}")
        return stored

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError("checkpoint_blocking on the event loop would block it: use `await ctx.checkpoint`")
        return asyncio.run_coroutine_threadsafe(self.record(stage, data), self._loop).result()
