"""Publishes this replica's job kinds and their policies, which is all the API knows of them."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import datetime

from durable_jobs.handlers import HandlerRegistry
from shared.domain.errors import DeadlineExceeded, JobsError, Unavailable
from shared.pause import pause, wait_at_most
from shared.storage import kind_store
from shared.storage.database import Database
from worker_service.metrics import WorkerMetrics

log = logging.getLogger(__name__)
PUBLISH_INTERVAL_SECONDS_DEFAULT = 30.0
# A replica not seen for this many intervals no longer counts when replicas are compared.
PUBLISHER_LIVE_INTERVALS = 3
PUBLISHER_FORGET_INTERVALS = 20
# The first publication's retries while the database cannot be reached: waits doubling up to the cap.
FIRST_RETRY_SECONDS = 0.2
FIRST_RETRY_SECONDS_MAX = 5.0


@dataclass(frozen=True)
class KindPublisher:
    db: Database
    registry: HandlerRegistry
    publisher: str
    started_at: datetime
    metrics: WorkerMetrics
    interval_seconds: float = PUBLISH_INTERVAL_SECONDS_DEFAULT

    async def publish(self) -> None:
        """Publishes every kind once; raises when the database cannot be reached."""
        policies = [spec.policy for spec in self.registry.specs()]
        async with self.db.transaction() as conn:
            await kind_store.publish(conn, self.publisher, self.started_at, policies)
            conflicts = await kind_store.policy_conflicts(conn, PUBLISHER_LIVE_INTERVALS * self.interval_seconds)
            await kind_store.forget_publishers(conn, PUBLISHER_FORGET_INTERVALS * self.interval_seconds)
        own = self.registry.kinds()
        conflicting = {c.kind: c for c in conflicts if c.kind in own}
        for kind in own:
            conflict = conflicting.get(kind)
            self.metrics.kind_policy_conflicts.labels(kind).set(conflict.policies if conflict else 0)
            if conflict:
                log.warning(
                    "replicas publish %d different policies for kind %s (%s); the replica started last wins",
                    conflict.policies,
                    kind,
                    ", ".join(conflict.publishers),
                    extra={"kind": kind},
                )

    async def publish_first(self, stop: asyncio.Event) -> bool:
        """Publishes once, trying again while the database cannot be reached: a replica started during
        an outage (or a failover) waits it out, not ready, as the API does, instead of exiting. False
        when `stop` came first."""
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                await self.publish()
                return True
            except (Unavailable, DeadlineExceeded) as exc:
                log.warning("publishing job kinds failed: %s; trying again in %.1fs", exc.message, delay)
            if await wait_at_most(stop, delay * random.uniform(0.5, 1.0)):
                return False
            delay = min(delay * 2, FIRST_RETRY_SECONDS_MAX)

    async def keep_published(self) -> None:
        """Refreshes the publication, so the API and the conflict check see this replica as live."""
        while True:
            await pause(self.interval_seconds * random.uniform(0.8, 1.2))
            try:
                await self.publish()
            except JobsError as exc:
                log.warning("publishing job kinds failed: %s", exc.message)
