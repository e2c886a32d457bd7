"""The API process's Prometheus metrics, on a registry of its own (no global state)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from api_service.queue_gauges import QueueGaugeCollector
from jobs.v1 import admin_pb2, jobs_pb2, worker_pb2
from shared.domain.errors import JobsError
from shared.domain.jobs import ReportOutcome, SubmitOutcome
from shared.metric_labels import TENANT_LIMIT_DEFAULT, TenantLabeler
from shared.pause import pause
from shared.pool_metrics import PoolStatsCollector
from shared.process_metrics import register_process_metrics

log = logging.getLogger(__name__)
RPC_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# The services whose calls the interceptor counts (api_service/interceptors.py), as (service, method).
COUNTED_METHODS = tuple(
    (service.full_name, method.name)
    for service in (
        jobs_pb2.DESCRIPTOR.services_by_name["JobService"],
        worker_pb2.DESCRIPTOR.services_by_name["WorkerService"],
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"],
    )
    for method in service.methods
)


class RpcMetrics:
    """gRPC server metrics with the conventional names (grpc_server_*)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code.",
            ["grpc_service", "grpc_method", "grpc_code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time to handle an RPC, until its status is sent.",
            ["grpc_service", "grpc_method"],
            buckets=RPC_SECONDS_BUCKETS,
            registry=registry,
        )

    def know_methods(self, methods: Iterable[tuple[str, str]]) -> None:
        """Creates every method's series at 0, with every status code: rate() cannot see the first
        error of a series born at that error, and the error ratio needs its numerator where calls
        succeeded only."""
        for service, method in methods:
            self.seconds.labels(service, method)
            for code in grpc.StatusCode:
                self.handled.labels(service, method, code.name)

    def observe(self, labels: tuple[str, str], code: grpc.StatusCode, seconds: float) -> None:
        service, method = labels
        self.handled.labels(service, method, code.name).inc()
        self.seconds.labels(service, method).observe(seconds)


class ReportMetrics:
    """What happens to workers' fenced reports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.fenced_rejections = Counter(
            "jobs_fenced_rejections_total",
            "Worker reports refused by the fencing check, by reason.",
            ["reason"],
            registry=registry,
        )
        # An oversized result, or a spawned job the API refuses, is refused by what it holds, not by the
        # fence: its attempt fails and is counted with the failed ones.
        for outcome in ReportOutcome:
            if outcome not in (ReportOutcome.ACCEPTED, ReportOutcome.RESULT_TOO_LARGE, ReportOutcome.CHILDREN_REFUSED):
                self.fenced_rejections.labels(outcome.name)

    def rejected(self, outcome: ReportOutcome) -> None:
        self.fenced_rejections.labels(outcome.name).inc()


class ScheduleMetrics:
    """What the scheduler loops' fires did, summed over replicas by the scrape."""

    OUTCOMES = ("submitted", "skipped", "buffered", "missed", "refused")

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.fires = Counter(
            "jobs_schedule_fires_total",
            "Schedule fires by outcome: submitted, skipped or buffered (overlap), missed (catch-up), refused.",
            ["outcome"],
            registry=registry or CollectorRegistry(),
        )
        for outcome in self.OUTCOMES:
            self.fires.labels(outcome)

    def fired(self, outcome: str, count: int = 1) -> None:
        self.fires.labels(outcome).inc(count)


class SubmissionMetrics:
    """Arrivals: jobs a submission created, counted once it committed. A replayed idempotent
    submission, or one attached to an identical job (dedupe by input), created nothing and counts
    nothing. The tenant label is bounded like the workers' counters (shared/metric_labels.py)."""

    def __init__(self, registry: CollectorRegistry | None = None, tenant_limit: int = TENANT_LIMIT_DEFAULT) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self._tenant_label = TenantLabeler(tenant_limit)
        self.submitted = Counter(
            "jobs_submitted_total",
            "Jobs accepted as new (committed); replays of an idempotency key and dedupe attachments are not.",
            ["tenant", "kind"],
            registry=registry,
        )
        self.spawned_jobs = Counter(
            "jobs_spawned_total",
            "Jobs handlers spawned (ctx.spawn), created with their parent's accepted completion; not in "
            "jobs_submitted_total.",
            ["tenant", "kind"],
            registry=registry,
        )

    def know(self, tenants: Iterable[str], kinds: Iterable[str]) -> None:
        """Creates the series of these tenants and kinds at 0 (a series born at its first arrival
        would hide that arrival from rate())."""
        labels = sorted({self._tenant_label(tenant) for tenant in tenants})
        for kind in kinds:
            for label in labels:
                self.submitted.labels(label, kind)

    def count_created(self, outcomes: Sequence[SubmitOutcome]) -> None:
        created = collections.Counter((o.job.tenant, o.job.kind) for o in outcomes if o.created)
        for (tenant, kind), count in created.items():
            self.submitted.labels(self._tenant_label(tenant), kind).inc(count)

    def count_created_kinds(self, tenant: str, kinds: Sequence[str]) -> None:
        """New jobs of one tenant, by kind: one counter update per kind, not per job."""
        for kind, count in collections.Counter(kinds).items():
            self.submitted.labels(self._tenant_label(tenant), kind).inc(count)

    def spawned(self, tenant: str, kinds: Sequence[str]) -> None:
        """One parent's children, once its completion committed."""
        for kind, count in collections.Counter(kinds).items():
            self.spawned_jobs.labels(self._tenant_label(tenant), kind).inc(count)


class ResultCacheMetrics:
    """The result cache of this replica. `read` is job_result, latest_result or resource_head."""

    READS = ("job_result", "latest_result", "resource_head")
    LOOKUP_OUTCOMES = ("hit", "miss", "coalesced", "rejected")

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry or CollectorRegistry()
        self.lookups = Counter(
            "jobs_result_cache_lookups_total",
            "Result reads by outcome: hit (answered from the cache), miss (started a database read), coalesced"
            " (waited for a read already under way), rejected (too many distinct reads under way).",
            ["read", "outcome"],
            registry=registry,
        )
        self.loads = Counter(
            "jobs_result_cache_loads_total",
            "Database reads made behind the result cache.",
            ["read"],
            registry=registry,
        )
        self.evictions = Counter(
            "jobs_result_cache_evictions_total",
            "Entries dropped: capacity (the entry or byte bound) or expired (the TTL).",
            ["reason"],
            registry=registry,
        )
        self.entries = Gauge("jobs_result_cache_entries", "Entries the result cache holds.", registry=registry)
        self.bytes = Gauge(
            "jobs_result_cache_bytes",
            "Bytes the result cache holds: payloads plus a fixed estimate per entry.",
            registry=registry,
        )
        for read in self.READS:
            self.loads.labels(read)
            for outcome in self.LOOKUP_OUTCOMES:
                self.lookups.labels(read, outcome)
        for reason in ("capacity", "expired"):
            self.evictions.labels(reason)

    def lookup(self, read: str, outcome: str) -> None:
        self.lookups.labels(read, outcome).inc()

    def loaded(self, read: str) -> None:
        self.loads.labels(read).inc()

    def evicted(self, reason: str, count: int) -> None:
        self.evictions.labels(reason).inc(count)

    def held(self, entries: int, size_bytes: int) -> None:
        self.entries.set(entries)
        self.bytes.set(size_bytes)


class ApiMetrics:
    def __init__(self, tenant_limit: int = TENANT_LIMIT_DEFAULT) -> None:
        self.registry = CollectorRegistry()
        register_process_metrics(self.registry, "api")
        self.rpc = RpcMetrics(self.registry)
        self.rpc.know_methods(COUNTED_METHODS)
        self.submissions = SubmissionMetrics(self.registry, tenant_limit)
        self.reports = ReportMetrics(self.registry)
        self.result_cache = ResultCacheMetrics(self.registry)
        self.schedules = ScheduleMetrics(self.registry)
        self.queue = QueueGaugeCollector()
        self.registry.register(self.queue)

    def watch_pool(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """Exports the connection pool's statistics, read from `stats` at scrape time."""
        self.registry.register(PoolStatsCollector(stats))


async def keep_arrival_series(
    submissions: SubmissionMetrics,
    tenants: Callable[[], Iterable[str]],
    kinds: Callable[[], Awaitable[Iterable[str]]],
    interval_seconds: float,
) -> None:
    """Creates the arrival series of every tenant of the principals file and every published kind, at
    start and then every interval (a reload of the file or a newly published kind)."""
    while True:
        try:
            submissions.know(tenants(), await kinds())
        except JobsError as exc:
            log.warning("could not read the published kinds for the arrival series: %s", exc.message)
        await pause(interval_seconds)
