"""A running job's view of its dependencies' results, read through the API under the attempt's lease."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from durable_jobs.handlers import RetryableError
from shared.domain.errors import LeaseLost
from shared.domain.ids import JobId
from shared.domain.jobs import LeaseRef, ReportOutcome
from worker_service.api_client import ApiClient, ApiUnreachable


class ApiDependencyResults:
    """Made on the worker's event loop (`loop`, when the caller has it at hand); `read_blocking` hops onto
    that loop from a handler's thread."""

    def __init__(
        self,
        api: ApiClient,
        lease: LeaseRef,
        deadline: Callable[[], float],
        loop: asyncio.AbstractEventLoop | None = None,
        loop_thread: int | None = None,
    ) -> None:
        self._api = api
        self._lease = lease
        self._deadline = deadline
        self._loop = loop or asyncio.get_running_loop()
        # The loop's thread: the caller's unless said (a reader made in a handler's thread says it).
        self._loop_thread = loop_thread or threading.get_ident()

    async def read(self) -> dict[JobId, bytes]:
        """Raises LeaseLost when this attempt's lease is no longer the job's current one."""
        try:
            found = await self._api.dependency_results(self._lease, deadline=self._deadline())
        except ApiUnreachable as exc:
            raise RetryableError(f"dependency results not read: {exc}") from None
        if isinstance(found, ReportOutcome):
            raise LeaseLost(f"dependency results refused: {found.value}")
        return found

    def read_blocking(self) -> dict[JobId, bytes]:
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError(
                "dependency_results_blocking on the event loop would block it: use `await ctx.dependency_results()`"
            )
        return asyncio.run_coroutine_threadsafe(self.read(), self._loop).result()
