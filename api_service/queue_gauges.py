"""The gauges read from the database: queue depth, oldest runnable wait, recent failures.

One aggregate query runs every refresh interval on the event loop, never on the scrape thread, and only
in the API replica that holds the exporter lock (a PostgreSQL session-level advisory lock), so the
numbers are exported once however many replicas run. A scrape reads the latest published snapshot.

The lock is proven, not assumed: the aggregate itself reads pg_locks for this session's lock, and a
snapshot is published only with that proof. A published snapshot stands for SNAPSHOT_VALID_INTERVALS
refresh intervals after its proof and is gone from scrapes after that, refreshed or not; a replica that
takes the lock publishes nothing for as long, so that when an exporter loses its session (its backend
killed, its host cut off) and does not know it yet, its last snapshot has expired before the next
exporter's first one appears. Replicas must run with the same refresh interval.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.domain.errors import JobsError
from shared.domain.jobs import JobState
from shared.metric_labels import OTHER_TENANT_LABEL, top_tenants
from shared.pause import pause
from shared.storage.queue_stats import ExporterSession, LimitRow, QueueRow

log = logging.getLogger(__name__)
REFRESH_SECONDS_DEFAULT = 10.0
FAILED_WINDOW_SECONDS_DEFAULT = 3600.0
# Two intervals: the next refresh's proof normally arrives within one, and a slow one may take another
# before the snapshot lapses. Handing over costs a new exporter as long without gauges.
SNAPSHOT_VALID_INTERVALS = 2.0


@dataclass(frozen=True)
class QueueSnapshot:
    """One refresh's numbers, tenants already bounded. Replaced whole, so a label set that is gone
    from the database is gone from the next scrape."""

    depth: dict[tuple[str, str, str], int]  # (tenant, kind, state) -> jobs, open states only
    oldest_wait_seconds: dict[tuple[str, str], float]  # (tenant, kind) -> seconds
    recently_failed: dict[tuple[str, str], int]  # (tenant, kind) -> jobs that ended FAILED in the window
    # Keys with an operator's limit or a hold; their number is the operators' to bound, not the tenants'.
    limits: tuple[LimitRow, ...] = ()
    # Kinds an operator paused: their jobs wait on purpose, which alerts on waiting work must tell apart.
    paused_kinds: tuple[str, ...] = ()
    # Per tenant (bounded as the depths are), its sequences halted by a FAILED or OUTCOME_UNKNOWN job.
    halted_sequences: dict[str, int] = field(default_factory=dict)


def fold_halted(halted: dict[str, int], snapshot: QueueSnapshot) -> dict[str, int]:
    """Halted sequences under the tenant labels the snapshot names; the other tenants' summed as "other"."""
    named = {tenant for tenant, _, _ in snapshot.depth} | {tenant for tenant, _ in snapshot.recently_failed}
    folded: dict[str, int] = defaultdict(int)
    for tenant, sequences in halted.items():
        folded[tenant if tenant in named else OTHER_TENANT_LABEL] += sequences
    return dict(folded)


def fold_snapshot(rows: Iterable[QueueRow], tenant_limit: int) -> QueueSnapshot:
    """Names the `tenant_limit` tenants with the most jobs in this snapshot; the rest become "other"
    (depths and failures summed, the oldest wait kept)."""
    rows = list(rows)
    volume: dict[str, int] = defaultdict(int)
    for row in rows:
        volume[row.tenant] += row.jobs
    named = top_tenants(volume, tenant_limit)
    depth: dict[tuple[str, str, str], int] = defaultdict(int)
    failed: dict[tuple[str, str], int] = defaultdict(int)
    oldest: dict[tuple[str, str], float] = {}
    for row in rows:
        tenant = row.tenant if row.tenant in named else OTHER_TENANT_LABEL
        if row.state is JobState.FAILED:
            failed[tenant, row.kind] += row.jobs
            continue
        depth[tenant, row.kind, row.state.value] += row.jobs
        if row.state in (JobState.PENDING, JobState.RETRY_WAIT):
            wait = max(row.oldest_wait_seconds or 0.0, 0.0)
            oldest[tenant, row.kind] = max(oldest.get((tenant, row.kind), 0.0), wait)
    return QueueSnapshot(dict(depth), oldest, dict(failed))


@dataclass(frozen=True)
class _Published:
    snapshot: QueueSnapshot
    # Monotonic time the snapshot was read, which is no later than the proof of the lock read with it.
    as_of: float
    # Monotonic time from which the snapshot is no longer exported, refreshed or not.
    valid_until: float


class QueueGaugeCollector(Collector):
    """Yields the database gauges only while this replica is the exporter and its snapshot is valid;
    jobs_metrics_exporter (1 or 0) is always there, so every replica says whether it is the one."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._published: _Published | None = None

    def publish(self, snapshot: QueueSnapshot, as_of: float, *, valid_until: float) -> None:
        self._published = _Published(snapshot, as_of, valid_until)

    def withdraw(self) -> None:
        self._published = None

    @property
    def exporting(self) -> bool:
        return self._valid() is not None

    def describe(self) -> Iterator[Metric]:
        return iter(_families(QueueSnapshot({}, {}, {}), exporting=True, age=0.0))

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        published = self._valid(now)
        if published is None:
            return iter(_families(None, exporting=False, age=0.0))
        return iter(_families(published.snapshot, exporting=True, age=now - published.as_of))

    def _valid(self, now: float | None = None) -> _Published | None:
        published = self._published  # one read: the refresher may swap it meanwhile
        if published is None:
            return None
        return published if (self._clock() if now is None else now) < published.valid_until else None


def _families(snapshot: QueueSnapshot | None, *, exporting: bool, age: float) -> list[Metric]:
    exporter = GaugeMetricFamily(
        "jobs_metrics_exporter",
        "1 in the one API replica that exports the database gauges, else 0.",
        value=1 if exporting else 0,
    )
    if not exporting:
        return [exporter]
    depth = GaugeMetricFamily(
        "jobs_queue_depth",
        "Open jobs by tenant, kind and state (pending, blocked, running, retry_wait, outcome_unknown).",
        labels=["tenant", "kind", "state"],
    )
    oldest = GaugeMetricFamily(
        "jobs_oldest_wait_seconds",
        "Age of the oldest runnable job (pending or retry_wait, run_after passed).",
        labels=["tenant", "kind"],
    )
    failed = GaugeMetricFamily(
        "jobs_recently_failed",
        "Jobs that ended FAILED within the failure window (JOBS_METRICS_FAILED_WINDOW_SECONDS).",
        labels=["tenant", "kind"],
    )
    limit_families = _limit_families(snapshot.limits if snapshot is not None else ())
    paused = GaugeMetricFamily(
        "jobs_kind_paused", "1 for each kind an operator paused (PauseKind): its jobs wait on purpose.", labels=["kind"]
    )
    halted = GaugeMetricFamily(
        "jobs_sequences_halted",
        "Sequences halted by a FAILED or OUTCOME_UNKNOWN job, waiting for it to be retried or cancelled.",
        labels=["tenant"],
    )
    snapshot_age = GaugeMetricFamily(
        "jobs_metrics_snapshot_age_seconds", "Time since the database gauges were last read.", value=max(age, 0.0)
    )
    if snapshot is not None:
        for depth_labels, count in sorted(snapshot.depth.items()):
            depth.add_metric(list(depth_labels), count)
        for kind_labels, seconds in sorted(snapshot.oldest_wait_seconds.items()):
            oldest.add_metric(list(kind_labels), seconds)
        for kind_labels, failures in sorted(snapshot.recently_failed.items()):
            failed.add_metric(list(kind_labels), failures)
        for kind in snapshot.paused_kinds:
            paused.add_metric([kind], 1)
        for tenant, sequences in sorted(snapshot.halted_sequences.items()):
            halted.add_metric([tenant], sequences)
    return [exporter, depth, oldest, failed, *limit_families, paused, halted, snapshot_age]


def _limit_families(limits: Iterable[LimitRow]) -> list[Metric]:
    running = GaugeMetricFamily(
        "jobs_limit_running", "Jobs running that carry the key (keys with a limit or a hold).", labels=["key"]
    )
    bound = GaugeMetricFamily(
        "jobs_limit_max_running", "The key's max_running; 0 when it bounds only the rate.", labels=["key"]
    )
    throttled = GaugeMetricFamily(
        "jobs_limit_throttled",
        "Runnable jobs carrying the key that wait because it has no room now (full, out of tokens, held).",
        labels=["key"],
    )
    saturated = GaugeMetricFamily(
        "jobs_limit_saturated", "1 while the key has no room for another start, else 0.", labels=["key"]
    )
    for row in sorted(limits, key=lambda r: r.key):
        running.add_metric([row.key], row.running)
        bound.add_metric([row.key], row.max_running)
        throttled.add_metric([row.key], row.waiting if row.saturated else 0)
        saturated.add_metric([row.key], 1 if row.saturated else 0)
    return [running, bound, throttled, saturated]


class QueueGaugeRefresher:
    """Every interval: hold (or try to take) the exporter lock, then read and publish a snapshot with
    the lock's proof. Replicas without the lock keep trying, so one takes the lock within an interval of
    the holder's end and exports once the holder's last snapshot has lapsed."""

    def __init__(
        self,
        session: ExporterSession,
        collector: QueueGaugeCollector,
        *,
        interval_seconds: float,
        failed_window_seconds: float,
        tenant_limit: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._collector = collector
        self._interval = interval_seconds
        self._failed_window = failed_window_seconds
        self._tenant_limit = tenant_limit
        self._clock = clock
        self._valid_seconds = SNAPSHOT_VALID_INTERVALS * interval_seconds
        self._term: tuple[int, float] | None = None

    async def run(self) -> None:
        """Refreshes until cancelled; closing the session on the way out hands the lock on."""
        try:
            while True:
                try:
                    await self.refresh_once()
                except Exception:  # noqa: BLE001 - a bug here must not end the gauges for good
                    log.exception("queue gauge refresh failed")
                await pause(self._interval)
        finally:
            self._collector.withdraw()
            await self._session.close()

    async def refresh_once(self) -> None:
        was_exporting = self._collector.exporting
        try:
            await self._refresh()
        except JobsError as exc:
            if not self._session.holds_lock:
                self._collector.withdraw()
            # Still holding (a statement timeout): the old snapshot stays until it expires.
            log.warning("queue gauges not refreshed: %s", exc.message)
        if was_exporting and not self._collector.exporting:
            log.warning("this replica no longer exports the database gauges")

    async def _refresh(self) -> None:
        if not await self._session.try_hold():
            self._collector.withdraw()
            return
        term_began = self._term_began()
        started = self._clock()
        rows = await self._session.read_snapshot(failed_window_seconds=self._failed_window)
        limits = await self._session.read_limits()
        paused_kinds = await self._session.read_paused_kinds()
        halted = await self._session.read_halted_sequences()
        if started < term_began + self._valid_seconds:
            return  # an earlier exporter's last snapshot may still be valid in its replica
        if not self._collector.exporting:
            log.info("this replica now exports the database gauges")
        folded = fold_snapshot(rows, self._tenant_limit)
        snapshot = replace(
            folded,
            limits=tuple(limits),
            paused_kinds=tuple(paused_kinds),
            halted_sequences=fold_halted(halted, folded),
        )
        self._collector.publish(snapshot, started, valid_until=started + self._valid_seconds)

    def _term_began(self) -> float:
        """When this session took the lock it holds now (measured at the first refresh that saw it)."""
        acquisitions = self._session.acquisitions
        if self._term is None or self._term[0] != acquisitions:
            # The lock was not held all along: a snapshot of the earlier term proves nothing now.
            self._collector.withdraw()
            self._term = (acquisitions, self._clock())
            log.info(
                "took the exporter lock; exporting in %.1fs, once any earlier exporter's snapshot has lapsed",
                self._valid_seconds,
            )
        return self._term[1]
