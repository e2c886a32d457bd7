"""A running job's view of its dependencies' results, read through the API under the attempt's lease."""

from __future__ import annotations

from collections.abc import Callable

from shared.domain.errors import LeaseLost
from shared.domain.ids import JobId
from shared.domain.jobs import LeaseRef, ReportOutcome
from worker_service.api_client import ApiClient


class ApiDependencyResults:
    def __init__(self, api: ApiClient, lease: LeaseRef, deadline: Callable[[], float]) -> None:
        self._api = api
        self._lease = lease
        self._deadline = deadline

    async def read(self) -> dict[JobId, bytes]:
        """Raises LeaseLost when this attempt's lease is no longer the job's current one."""
        found = await self._api.dependency_results(self._lease, deadline=self._deadline())
        if isinstance(found, ReportOutcome):
            raise LeaseLost(f"dependency results refused: {found.value}")
        return found
