"""The database connection pool's statistics as Prometheus metrics, read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# (metric name, psycopg_pool statistic, help). Gauges are the pool's current measures.
_GAUGES = (
    ("jobs_db_pool_min_connections", "pool_min", "Connections the pool keeps open at least."),
    ("jobs_db_pool_max_connections", "pool_max", "Connections the pool may open at most."),
    ("jobs_db_pool_connections", "pool_size", "Connections open now, in use or idle."),
    ("jobs_db_pool_idle_connections", "pool_available", "Open connections idle in the pool now."),
    ("jobs_db_pool_waiting_requests", "requests_waiting", "Callers waiting for a connection now."),
)
# (metric name without _total, statistic, scale to base units, help). Counters since the pool opened.
_COUNTERS = (
    ("jobs_db_pool_requests", "requests_num", 1, "Connections requested from the pool."),
    ("jobs_db_pool_requests_queued", "requests_queued", 1, "Requests that had to wait for a connection."),
    ("jobs_db_pool_request_wait_seconds", "requests_wait_ms", 1e-3, "Time requests spent waiting."),
    ("jobs_db_pool_request_errors", "requests_errors", 1, "Requests that got no connection in time."),
    ("jobs_db_pool_usage_seconds", "usage_ms", 1e-3, "Time connections spent lent out."),
    ("jobs_db_pool_returns_bad", "returns_bad", 1, "Connections returned in a bad state and discarded."),
    ("jobs_db_pool_connects", "connections_num", 1, "Connection attempts to the database."),
    ("jobs_db_pool_connect_seconds", "connections_ms", 1e-3, "Time spent establishing connections."),
    ("jobs_db_pool_connect_errors", "connections_errors", 1, "Connection attempts that failed."),
    ("jobs_db_pool_connections_lost", "connections_lost", 1, "Connections found broken by a check."),
)


class PoolStatsCollector(Collector):
    """Reads `stats()` (psycopg_pool's get_stats) on every scrape: an in-memory copy, no I/O."""

    def __init__(self, stats: Callable[[], Mapping[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self._stats()
        except RuntimeError:
            # The pool's counters are updated on the event loop while this runs on the scrape thread;
            # a copy that raced a new key is skipped, and the next scrape reads it.
            return
        yield from self._families(stats)

    def describe(self) -> Iterator[Metric]:
        return self._families({})

    @staticmethod
    def _families(stats: Mapping[str, int]) -> Iterator[Metric]:
        for name, key, help_text in _GAUGES:
            yield GaugeMetricFamily(name, help_text, value=stats.get(key, 0))
        for name, key, scale, help_text in _COUNTERS:
            yield CounterMetricFamily(name, help_text, value=stats.get(key, 0) * scale)
