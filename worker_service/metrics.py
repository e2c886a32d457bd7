"""A worker replica's Prometheus metrics, on a registry of its own."""

from __future__ import annotations

import bisect
import collections
import enum
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar as ExemplarSample
from prometheus_client.utils import floatToGoString

from shared.domain.jobs import ClaimedJob, ErrorCategory
from shared.metric_labels import TenantLabeler
from shared.pool_metrics import PoolStatsCollector
from shared.process_metrics import register_process_metrics

MetricT = TypeVar("MetricT", bound=MetricWrapperBase)
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class AttemptOutcome(enum.StrEnum):
    """Every `outcome` of jobs_completed_total (docs/METRICS.md says what each means)."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    RESOURCE_DELETED = "resource_deleted"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    PUSHED_BACK = "pushed_back"
    ENDED = "ended"
    UNREPORTED = "unreported"


FAILURE_CATEGORIES = tuple(category.value for category in ErrorCategory)
# An exemplar's labels: the trace and span of the attempt that made the observation.
Exemplar = dict[str, str]


@dataclass(slots=True)
class _KindSeries:
    """One kind's histogram: each bucket's own count (not cumulative), the last bound +Inf's."""

    counts: list[int]
    total: float = 0.0
    exemplars: list[ExemplarSample | None] = field(default_factory=list)


class SecondsHistogram(Collector):
    """A histogram of seconds by kind, observed on the event loop (its only writer) in plain lists and
    exported when scraped. prometheus_client's Histogram takes a lock for its sum and another for the
    bucket at each observation, two observations per job; here one is a bisect and two additions. A
    scrape reads copies: a bucket counted between two reads shows at the next scrape."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(float(bound) for bound in buckets)
        self._les = (*(floatToGoString(bound) for bound in self._bounds), "+Inf")
        self._series: dict[str, _KindSeries] = {}
        registry.register(self)

    def know(self, kind: str) -> None:
        """The kind's series exists at 0 from now on."""
        if kind not in self._series:
            self._series[kind] = _KindSeries([0] * len(self._les), exemplars=[None] * len(self._les))

    def observe(self, kind: str, seconds: float, exemplar: Exemplar | None = None) -> None:
        series = self._series.get(kind)
        if series is None:
            self.know(kind)
            series = self._series[kind]
        # The first bound at or above the value, as prometheus_client's `value <= bound`.
        bucket = bisect.bisect_left(self._bounds, seconds)
        series.counts[bucket] += 1
        series.total += seconds
        if exemplar is not None:
            series.exemplars[bucket] = ExemplarSample(exemplar, seconds, time.time())

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=["kind"])]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=["kind"])
        for kind, series in list(self._series.items()):
            counts, exemplars, total = list(series.counts), list(series.exemplars), series.total
            buckets: list[tuple[str, float] | tuple[str, float, ExemplarSample]] = []
            cumulative = 0
            for le, count, exemplar in zip(self._les, counts, exemplars, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)) if exemplar is None else (le, float(cumulative), exemplar))
            family.add_metric([kind], buckets, total)
        yield family


class _BeforeScrape(Collector):
    """Registered ahead of the metrics it updates: a scrape (or a test reading a sample) first folds
    the per-job tallies into them, then reads them."""

    def __init__(self, fold: Callable[[], None]) -> None:
        self._fold = fold

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        self._fold()
        return iter(())


class WorkerMetrics:
    def __init__(self, tenant_limit: int) -> None:
        self.registry = r = CollectorRegistry()
        register_process_metrics(r, "worker")
        # Attempts' outcomes as running totals by (tenant, kind, outcome), written on the event loop only,
        # and what of them the counter has been given: an increment of a labelled counter takes a lock,
        # one per job, where a scrape folds each key's difference once.
        self._outcomes: dict[tuple[str, str, AttemptOutcome], int] = {}
        self._outcomes_folded: dict[tuple[str, str, AttemptOutcome], int] = {}
        self._fold_lock = threading.Lock()
        r.register(_BeforeScrape(self._fold))
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self.tenant_label = TenantLabeler(tenant_limit)
        self._kinds: set[str] = set()
        self._tenant_labels: set[str] = set()
        self.claimed = Counter("jobs_claimed_total", "Jobs claimed (attempts started).", ["tenant", "kind"], registry=r)
        self.retries = Counter(
            "jobs_retries_total", "Claims of a job that had run before (attempt > 1).", ["tenant", "kind"], registry=r
        )
        self.completed = Counter(
            "jobs_completed_total", "Attempts that ended, by outcome.", ["tenant", "kind", "outcome"], registry=r
        )
        self.failures = Counter(
            "jobs_attempt_failures_total",
            "Failed attempts the API accepted, by error category.",
            ["tenant", "kind", "category"],
            registry=r,
        )
        self.queue_wait = SecondsHistogram(
            "jobs_queue_wait_seconds", "From runnable to claimed.", SECONDS_BUCKETS, registry=r
        )
        self.execution = SecondsHistogram(
            "jobs_execution_seconds", "Handler run time of one attempt.", SECONDS_BUCKETS, registry=r
        )
        self.leases_lost = Counter("jobs_leases_lost_total", "Leases this replica lost while working.", registry=r)
        self.in_flight = Gauge("jobs_in_flight", "Jobs this replica holds a lease on.", registry=r)
        self.claim_batch = Histogram(
            "jobs_claim_batch_size",
            "Jobs returned by one claim statement.",
            buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            registry=r,
        )
        self.heartbeat_seconds = Histogram(
            "jobs_heartbeat_rtt_seconds", "Round trip of one Heartbeat call.", buckets=SECONDS_BUCKETS, registry=r
        )
        self.rescued = Counter(
            "jobs_rescued_total",
            "Expired leases and past-deadline jobs this replica's sweeps ended.",
            ["state"],
            registry=r,
        )
        self.sweep_rejected = Counter(
            "jobs_sweep_rejected_total",
            "Jobs a sweep could not move because the database refused the statement for them.",
            ["sweep"],
            registry=r,
        )

        self.tally_corrections = Counter(
            "jobs_running_tally_corrections_total",
            "Keys whose running tally this replica's sweep found different from the running jobs, and corrected.",
            registry=r,
        )

        self.kind_policy_conflicts = Gauge(
            "jobs_kind_policy_conflicts",
            "Different policies that live replicas publish for a kind this replica runs (0: they agree).",
            ["kind"],
            registry=r,
        )

    def watch_pool(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """Exports the connection pool's statistics, read from `stats` at scrape time."""
        self.registry.register(PoolStatsCollector(stats))

    def _child(self, metric: MetricT, *labels: str) -> MetricT:
        """The labelled series, looked up once: `labels()` takes a lock and builds keys on every call,
        which showed in the worker's profile at thousands of jobs per second."""
        key = (metric, labels)
        child = self._children.get(key)
        if not isinstance(child, type(metric)):
            child = self._children[key] = metric.labels(*labels)
        return child

    def know_kinds(self, kinds: Iterable[str]) -> None:
        """Creates every series of these kinds at 0, for the tenants already known and the ones to come."""
        new = set(kinds) - self._kinds
        self._kinds |= new
        for kind in sorted(new):
            self.queue_wait.know(kind)
            self.execution.know(kind)
            for label in sorted(self._tenant_labels):
                self._create_tenant_kind(label, kind)

    def _tenant(self, tenant: str) -> str:
        """The tenant's label; the first time a label is seen, every series it names is created at 0.
        rate() cannot see what a series counted before its first scrape: a series born at its first
        failure would hide that failure from every rule and panel."""
        label = self.tenant_label(tenant)
        if label not in self._tenant_labels:
            self._tenant_labels.add(label)
            for kind in sorted(self._kinds):
                self._create_tenant_kind(label, kind)
        return label

    def _create_tenant_kind(self, label: str, kind: str) -> None:
        self._child(self.claimed, label, kind)
        self._child(self.retries, label, kind)
        for outcome in AttemptOutcome:
            self._child(self.completed, label, kind, outcome)
        for category in FAILURE_CATEGORIES:
            self._child(self.failures, label, kind, category)

    def count_claims(self, jobs: Iterable[ClaimedJob]) -> None:
        """Counts a claim's jobs: an increment per tenant and kind, not one per job."""
        counted = collections.Counter((job.tenant, job.kind, job.attempt > 1) for job in jobs)
        for (tenant, kind, retried), count in counted.items():
            label = self._tenant(tenant)
            self._child(self.claimed, label, kind).inc(count)
            if retried:
                self._child(self.retries, label, kind).inc(count)

    def count_failure(self, tenant: str, kind: str, category: str) -> None:
        self._child(self.failures, self._tenant(tenant), kind, category).inc()

    def count_outcome(self, tenant: str, kind: str, outcome: AttemptOutcome) -> None:
        """On the event loop: counted into jobs_completed_total when next scraped."""
        key = (tenant, kind, outcome)
        self._outcomes[key] = self._outcomes.get(key, 0) + 1

    def _fold(self) -> None:
        """Gives the counter what each key counted since the last fold. Runs in the scraping thread while
        the loop counts on: the totals are only ever read here, never reset, so nothing counted is lost."""
        with self._fold_lock:
            for key, total in list(self._outcomes.items()):
                folded = self._outcomes_folded.get(key, 0)
                if total > folded:
                    tenant, kind, outcome = key
                    self._child(self.completed, self._tenant(tenant), kind, outcome).inc(total - folded)
                    self._outcomes_folded[key] = total

    def observe_queue_wait(self, kind: str, seconds: float, exemplar: Exemplar | None = None) -> None:
        self.queue_wait.observe(kind, seconds, exemplar)

    def observe_execution(self, kind: str, seconds: float, exemplar: Exemplar | None = None) -> None:
        self.execution.observe(kind, seconds, exemplar)
