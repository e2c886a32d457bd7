"""The worker's periodic duties besides running jobs: wake-ups, the lease and deadline sweeps, the fold of
rate keys' charges, retention."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.domain.errors import JobsError
from shared.domain.ids import JobId
from shared.pause import pause
from shared.storage import lease_store, scheduling_store
from shared.storage.connection_watchdog import SilenceWatch
from shared.storage.database import Database
from shared.storage.notifications import LISTENING, RUNNABLE_CHANNEL, STOP_CHANNEL, listen
from shared.storage.retention import delete_finished_jobs
from worker_service.metrics import WorkerMetrics

log = logging.getLogger(__name__)
RESCUE_BATCH_LIMIT = 500
# How long a sweep leaves out a job the database refused to move before it tries the job again.
REJECTED_PASS_OVER_SECONDS = 300.0
RETENTION_BATCH_LIMIT = 1000
LISTEN_RETRY_MAX_SECONDS = 10.0


async def listen_for_work(
    database_url: str,
    wake: Callable[[], None],
    stop_requested: Callable[[str], None],
    watch: SilenceWatch | None = None,
) -> None:
    """Calls `wake` on every insert notification and `stop_requested(job_id)` when a running job was
    cancelled or superseded; reconnects with backoff, waking once per reconnect because notifications
    sent while disconnected are lost (heartbeats still deliver the stops)."""
    delay = 0.5
    while True:
        try:
            async for channel, payload in listen(database_url, RUNNABLE_CHANNEL, STOP_CHANNEL, watch=watch):
                if (channel, payload) == LISTENING:
                    delay = 0.5
                    wake()
                elif channel == STOP_CHANNEL:
                    stop_requested(payload)
                else:
                    wake()
        except JobsError as exc:
            log.warning("wake-up listener lost its connection: %s", exc.message)
        await pause(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, LISTEN_RETRY_MAX_SECONDS)


class PassedOver:
    """Jobs a sweep was refused for, left out of its passes for a while: however many there are, they
    cannot fill every batch and starve the rows behind them, and each comes back once the time is up."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._until: dict[JobId, float] = {}

    def add(self, job_id: JobId) -> None:
        self._until[job_id] = time.monotonic() + self._seconds

    def current(self) -> list[JobId]:
        now = time.monotonic()
        self._until = {job_id: until for job_id, until in self._until.items() if until > now}
        return list(self._until)


@dataclass(frozen=True)
class _Sweep:
    name: str
    run: Callable[..., Awaitable[lease_store.SweepPass]]
    passed_over: PassedOver


async def rescue_leases(
    db: Database,
    metrics: WorkerMetrics,
    interval_seconds: float,
    *,
    batch_limit: int = RESCUE_BATCH_LIMIT,
    pass_over_seconds: float = REJECTED_PASS_OVER_SECONDS,
) -> None:
    """Ends expired leases and fails jobs past their deadline. Every replica runs it; SKIP LOCKED
    keeps the sweeps from colliding. Each sweep runs in a transaction of its own and a row the database
    refuses is left behind, so neither one bad row nor one failing sweep stops the rest."""
    sweeps = (
        _Sweep("lease", lease_store.rescue_expired_leases, PassedOver(pass_over_seconds)),
        _Sweep("deadline", lease_store.fail_past_deadline, PassedOver(pass_over_seconds)),
    )
    for sweep in sweeps:
        # At 0 from the start: an alert on its increase must see the first rejection too.
        metrics.sweep_rejected.labels(sweep.name)
    while True:
        for sweep in sweeps:
            await _sweep_once(db, metrics, sweep, batch_limit)
        await pause(interval_seconds * random.uniform(0.8, 1.2))


async def _sweep_once(db: Database, metrics: WorkerMetrics, sweep: _Sweep, batch_limit: int) -> None:
    try:
        async with db.transaction() as conn:
            done = await sweep.run(conn, limit=batch_limit, passed_over=sweep.passed_over.current())
    except JobsError as exc:
        log.warning("%s sweep failed: %s", sweep.name, exc.message)
        return
    for row in done.rejected:
        sweep.passed_over.add(row.job_id)
        metrics.sweep_rejected.labels(sweep.name).inc()
        log.error(
            "%s sweep could not move a job, left as it is: %s",
            sweep.name,
            row.error,
            extra={"job_id": row.job_id},
        )
    for t in done.moved:
        metrics.rescued.labels(t.state.value).inc()
        log.info(
            "%s sweep moved job to %s",
            sweep.name,
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


async def fold_key_charges(db: Database, interval_seconds: float) -> None:
    """Folds the charges that claims made under rate keys' shared locks into the keys' buckets, one key per
    transaction, so that a key whose tokens never run short does not keep a row for every backend that
    ever charged it. Every replica runs it; a key already folded by another has nothing left to fold."""
    while True:
        try:
            async with db.transaction() as conn:
                keys = await scheduling_store.charged_keys(conn)
            for key in keys:
                async with db.transaction() as conn:
                    await scheduling_store.fold_key_charges(conn, key)
        except JobsError as exc:
            log.warning("folding rate keys' charges failed: %s", exc.message)
        await pause(interval_seconds * random.uniform(0.8, 1.2))


async def tend_running_tallies(db: Database, metrics: WorkerMetrics, interval_seconds: float) -> None:
    """Keeps the running jobs tallied per key compact and right: folds the rows of backends that have
    exited, and corrects (and reports) a key whose tally differs from a count of its running rows, which
    only a change made with the jobs table's triggers disabled can cause. Every replica runs it; one tends
    at a time, and the others find nothing left or leave it to that one."""
    while True:
        try:
            async with db.transaction() as conn:
                corrected = await scheduling_store.tend_running_tallies(conn)
            if corrected:
                log.warning("running tallies differed from the running jobs and were corrected: %s", corrected)
                metrics.tally_corrections.inc(len(corrected))
        except JobsError as exc:
            log.warning("tending the running tallies failed: %s", exc.message)
        await pause(interval_seconds * random.uniform(0.8, 1.2))


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
        await pause(interval_seconds * random.uniform(0.8, 1.2))
