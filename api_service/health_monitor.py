"""Keeps the gRPC health status in step with the database: NOT_SERVING while it does not answer."""

from __future__ import annotations

import asyncio
import logging

from grpc_health.v1 import health, health_pb2

from shared.pause import pause
from shared.storage.database import Database

log = logging.getLogger(__name__)

# Readiness: "" and the two job services follow the database. Liveness: the process answers at all.
READINESS_SERVICES = ("", "jobs.v1.JobService", "jobs.v1.WorkerService")
LIVENESS_SERVICE = "liveness"


async def not_serving_yet(servicer: health.aio.HealthServicer) -> None:
    """Readiness before the first check: grpc's servicer starts the server's overall status ("") as
    SERVING, which a probe could read before the database was ever asked."""
    for service in READINESS_SERVICES:
        await servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)


class HealthMonitor:
    def __init__(
        self,
        servicer: health.aio.HealthServicer,
        db: Database,
        interval_seconds: float,
        *,
        started: asyncio.Event | None = None,
    ) -> None:
        """Readiness also waits for `started` (the built-in kinds published): before, a submission of
        them would be refused as an unknown kind."""
        self._servicer = servicer
        self._db = db
        self._interval = interval_seconds
        self._started = started
        self._serving: bool | None = None

    async def run(self) -> None:
        """Pings forever; cancelled at shutdown."""
        await self._servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        while True:
            if not await self._db.ping(timeout_seconds=self._interval * 2):
                await self._set(False, logging.WARNING, "database unreachable")
            elif self._started is not None and not self._started.is_set():
                await self._set(False, logging.INFO, "database reachable; the built-in job kinds not published yet")
            else:
                await self._set(True, logging.INFO, "database reachable")
            await pause(self._interval)

    async def _set(self, serving: bool, level: int, why: str) -> None:
        if serving == self._serving:
            return
        self._serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in READINESS_SERVICES:
            await self._servicer.set(service, status)
        log.log(level, "%s", why)
