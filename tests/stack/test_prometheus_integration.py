"""A real Prometheus (Debian's package) scrapes the real API and two workers on loopback, evaluates the
shipped rules, and ranks the tenant with more retries first. tests/stack/test_dashboard_against_database.py
checks every panel and ratio against the database the same way.

The binary must be there (`make system-deps`): a missing one fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceProcess, ServiceStack, wait_until
from tests.prometheus_server import PrometheusServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

RETRY_RATE_RULE = "tenant:jobs_retry_rate:ratio_rate5m"
FLAKY_JOBS_PER_TENANT = 12
WARM_UP_ROUNDS_MAX = 10


def _flaky(fail_times: int) -> jobs_pb2.SubmitJobRequest:
    return jobs_pb2.SubmitJobRequest(
        kind="flaky", payload=json.dumps({"fail_times": fail_times, "category": "retryable"}).encode()
    )


def _unfinished(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed')").fetchone()[0]


def _jobs_by_tenant(database_url: str) -> dict[str, float]:
    with psycopg.connect(database_url) as conn:
        return {tenant: float(n) for tenant, n in conn.execute("SELECT tenant, count(*) FROM jobs GROUP BY 1")}


def _warm_up(stack: ServiceStack, workers: list[ServiceProcess], prometheus: PrometheusServer) -> None:
    """rate() cannot see what a counter counted before its first scrape, so every worker's flaky series
    of both tenants must exist (and be scraped) before the measured jobs start."""
    for _ in range(WARM_UP_ROUNDS_MAX):
        for tenant in stack.tenants:
            stack.tenant(tenant).submit_many([_flaky(0) for _ in range(6)])
        wait_until(lambda: _unfinished(stack.database_url) == 0, timeout=20, interval=0.1, what="warm-up jobs")
        if all(
            w.metric_value("jobs_claimed_total", {"tenant": t, "kind": "flaky"}) > 0
            for w in workers
            for t in stack.tenants
        ):
            break
    else:
        pytest.fail("the two workers did not both claim flaky jobs of both tenants")
    wait_until(
        lambda: len(prometheus.query('jobs_retries_total{kind="flaky"}')) == 2 * len(stack.tenants),
        timeout=15,
        interval=0.2,
        what="prometheus to scrape every worker's series",
    )


def test_prometheus_ranks_the_tenant_with_more_retries_first(service_stack: ServiceStack, start_prometheus) -> None:
    api = service_stack.start_api(JOBS_METRICS_REFRESH_SECONDS="1")
    workers = [service_stack.start_worker(name, JOBS_WORKER_CONCURRENCY="4") for name in ("w1", "w2")]
    prometheus = start_prometheus(api, workers)
    _warm_up(service_stack, workers, prometheus)
    retries_before = prometheus.values_by('sum by (tenant) (jobs_retries_total{kind="flaky"})', "tenant")
    assert retries_before == {"acme": 0.0, "globex": 0.0}

    # acme: every job fails twice (3 claims, 2 retries); globex: half fail once, half never.
    service_stack.tenant("acme").submit_many([_flaky(2) for _ in range(FLAKY_JOBS_PER_TENANT)])
    half = FLAKY_JOBS_PER_TENANT // 2
    service_stack.tenant("globex").submit_many([_flaky(1) for _ in range(half)] + [_flaky(0) for _ in range(half)])
    wait_until(lambda: _unfinished(service_stack.database_url) == 0, timeout=40, interval=0.2, what="flaky jobs")

    expected_retries = {"acme": 2.0 * FLAKY_JOBS_PER_TENANT, "globex": 1.0 * half}
    wait_until(
        lambda: (
            prometheus.values_by('sum by (tenant) (jobs_retries_total{kind="flaky"})', "tenant") == expected_retries
        ),
        timeout=15,
        interval=0.2,
        what="prometheus to scrape the final retry counts",
    )
    scraped_at = time.time()
    # The rule's own evaluation time, so that the ranking below reflects the final counts.
    wait_until(
        lambda: all(float(s["value"][1]) > scraped_at + 1 for s in prometheus.query(f"timestamp({RETRY_RATE_RULE})")),
        timeout=15,
        interval=0.2,
        what="a rule evaluation after the final scrape",
    )

    ranking = prometheus.query(f"sort_desc({RETRY_RATE_RULE})")
    ranked = [(s["metric"]["tenant"], round(float(s["value"][1]), 3)) for s in ranking]
    assert [tenant for tenant, _ in ranked] == ["acme", "globex"], ranked
    # The measured jobs alone: 24 retries in 36 claims against 6 in 18. The warm-up's claims, and
    # rate()'s extrapolation over series a few seconds long, pull both somewhat lower.
    assert 0.35 < ranked[0][1] < 0.75 and 0.1 < ranked[1][1] < 0.4, ranked

    exporters = prometheus.values_by("jobs_metrics_exporter", "job")
    assert exporters == {"jobs-api": 1.0}, "the one API replica exports the database gauges"
    assert {s["metric"]["job"] for s in prometheus.query("jobs_metrics_snapshot_age_seconds")} == {"jobs-api"}
    # The gauges come from a snapshot refreshed every second and scraped after: the last one may still
    # hold a job that has since finished, so the check waits out one refresh and one scrape.
    wait_until(
        lambda: prometheus.query("jobs_queue_depth") == [],
        timeout=15,
        interval=0.2,
        what="no job open any more in the scraped queue depth",
    )
    assert prometheus.values_by("tenant_kind:jobs_recently_failed:max", "tenant") == {}

    # Arrivals: every job row, counted once by the API that accepted it.
    stored = _jobs_by_tenant(service_stack.database_url)
    wait_until(
        lambda: prometheus.values_by("sum by (tenant) (jobs_submitted_total)", "tenant") == stored,
        timeout=15,
        interval=0.2,
        what=f"prometheus to count the {stored} stored jobs as arrivals",
    )
    builds = prometheus.query("jobs_build_info")
    assert sorted(s["metric"]["component"] for s in builds) == ["api", "worker", "worker"], builds
    memory = prometheus.values_by("process_resident_memory_bytes", "instance")
    assert len(memory) == 3 and all(value > 0 for value in memory.values()), memory
    assert prometheus.query('ALERTS{alertname="JobsWorkersAbsent"}') == []

    # Shown with -s (or -rP): what the note quotes as the scrape excerpt and the query result.
    print(f"\nprometheus query sort_desc({RETRY_RATE_RULE}): {ranked}")
    print(_excerpt(workers[0].metrics_text(), ("jobs_claimed_total", "jobs_retries_total", "jobs_attempt_failures")))
    print(_excerpt(api.metrics_text(), ("jobs_metrics_", "jobs_fenced_rejections_total", "jobs_db_pool_conn")))


def _excerpt(text: str, prefixes: tuple[str, ...]) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(prefixes))
