"""The worker's periodic duties besides running jobs: wake-ups and the lease rescue sweep."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from shared.domain.errors import JobsError
from shared.storage import lease_store
from shared.storage.database import Database
from shared.storage.notifications import LISTENING, RUNNABLE_CHANNEL, STOP_CHANNEL, listen
from shared.storage.retention import delete_finished_jobs
from worker_service.metrics import WorkerMetrics

log = logging.getLogger(__name__)
RESCUE_BATCH_LIMIT = 500
RETENTION_BATCH_LIMIT = 1000
LISTEN_RETRY_MAX_SECONDS = 10.0


async def listen_for_work(database_url: str, wake: Callable[[], None], stop_requested: Callable[[str], None]) -> None:
    """Calls `wake` on every insert notification and `stop_requested(job_id)` when a running job was
    cancelled or superseded; reconnects with backoff, waking once per reconnect because notifications
    sent while disconnected are lost (heartbeats still deliver the stops)."""
    delay = 0.5
    while True:
        try:
            async for channel, payload in listen(database_url, RUNNABLE_CHANNEL, STOP_CHANNEL):
                if (channel, payload) == LISTENING:
                    delay = 0.5
                    wake()
                elif channel == STOP_CHANNEL:
                    stop_requested(payload)
                else:
                    wake()
        except JobsError as exc:
            log.warning("wake-up listener lost its connection: %s", exc.message)
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, LISTEN_RETRY_MAX_SECONDS)


async def rescue_leases(db: Database, metrics: WorkerMetrics, interval_seconds: float) -> None:
    """Ends expired leases and fails jobs past their deadline. Every replica runs it; SKIP LOCKED
    keeps the sweeps from colliding."""
    while True:
        try:
            async with db.transaction() as conn:
                ended = await lease_store.rescue_expired_leases(conn, limit=RESCUE_BATCH_LIMIT)
            async with db.transaction() as conn:
                ended += await lease_store.fail_past_deadline(conn, limit=RESCUE_BATCH_LIMIT)
            for t in ended:
                metrics.rescued.labels(t.state.value).inc()
                log.info(
                    "lease sweep moved job to %s",
                    t.state.value,
                    extra={
                        "job_id": t.job_id,
                        "tenant": t.tenant,
                        "kind": t.kind,
                        "attempt": t.attempts,
                        "fencing_token": t.fencing_token,
                        "state": t.state.value,
                    },
                )
        except JobsError as exc:
            log.warning("lease sweep failed: %s", exc.message)
        await asyncio.sleep(interval_seconds * random.uniform(0.8, 1.2))


async def apply_retention(db: Database, retention_seconds: float, interval_seconds: float) -> None:
    """Deletes finished jobs older than the retention period, a batch at a time, so the history never
    slows the hot path. Every replica may run it; SKIP LOCKED keeps the sweeps apart."""
    while True:
        try:
            deleted = RETENTION_BATCH_LIMIT
            while deleted == RETENTION_BATCH_LIMIT:
                async with db.transaction() as conn:
                    deleted = await delete_finished_jobs(
                        conn, retention_seconds=retention_seconds, limit=RETENTION_BATCH_LIMIT
                    )
                if deleted:
                    log.info("retention deleted %d finished jobs", deleted, extra={"count": deleted})
        except JobsError as exc:
            log.warning("retention sweep failed: %s", exc.message)
        await asyncio.sleep(interval_seconds * random.uniform(0.8, 1.2))
