"""What operators see must be the truth: a real Prometheus (Debian's package) scrapes the real API and two
fresh worker replicas every second with the shipped rules; after bursts of failures and outcome-unknowns,
every query of the shipped dashboard (its variables substituted as Grafana does) and every ratio rule is
compared with the database.

The counters' panels are compared over the bursts' window: every series they read must exist before it
(at 0, from the moment its labels are known), so the panels' area equals the database's count. The
ratio rules cover the whole run, replicas' first minutes included, where Prometheus cannot see what a
series counted before its first scrape: the test measures that part (the first scraped values) and says
how much it is.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2

from jobs.v1 import admin_pb2, jobs_pb2
from tests.dashboard_queries import load_dashboard, panel_queries, substitute, variable_queries
from tests.process_fixtures import ServiceProcess, ServiceStack, wait_until
from tests.prometheus_server import SCRAPE_INTERVAL_SECONDS, PrometheusServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

OPEN_STATES = ("pending", "blocked", "running", "retry_wait", "outcome_unknown")
# How the test looks at the dashboard: the last five minutes, at Prometheus's one-second scrapes.
DASHBOARD_RANGE_SECONDS = 300.0
# Past the last change, the panels' rate windows ($__rate_interval, 4 s) and one scrape have closed.
SETTLED_AFTER_SECONDS = 6.0
# The area under a rate panel stands for a count, give or take what sampling adds. rate() extrapolates
# a window to its edges, except back past a sample of 0: a counter that was at 0 when increments come
# (as a series created at 0 is) loses up to one scrape interval of each window holding them, a quarter
# of the count at 4-second windows ($__rate_interval) and 1-second scrapes. Prometheus's way, not ours.
AREA_ABSOLUTE_SLACK = 0.6
AREA_RELATIVE_SLACK = 0.05
AREA_ZERO_START_SHARE = 0.25
# rate()'s extrapolation to the end of a 5-minute window differs a little between series.
RATIO_RELATIVE_SLACK = 0.1
# The database gauges are read every second and scraped every second; a busy machine delays both.
GAUGE_AGE_SLACK_SECONDS = 5.0
WARM_UP_ROUNDS_MAX = 20
BURST_PERMANENT = 3
BURST_OUTCOME_UNKNOWN = 2
BURST_SUCCEEDING = 20
# Under the rate panels: counters and the latency histograms' counts.
RATED_COUNTERS = (
    "jobs_claimed_total",
    "jobs_retries_total",
    "jobs_completed_total",
    "jobs_attempt_failures_total",
    "jobs_submitted_total",
    "jobs_fenced_rejections_total",
    "grpc_server_handled_total",
    "jobs_queue_wait_seconds_count",
    "jobs_execution_seconds_count",
)


def _flaky(category: str, fail_times: int) -> jobs_pb2.SubmitJobRequest:
    payload = json.dumps({"fail_times": fail_times, "category": category}).encode()
    return jobs_pb2.SubmitJobRequest(kind="flaky", payload=payload)


def _echo(count: int, **fields) -> list[jobs_pb2.SubmitJobRequest]:
    return [jobs_pb2.SubmitJobRequest(kind="echo", payload=b"x", **fields) for _ in range(count)]


def _rows(database_url: str, sql: str, *params) -> list[tuple]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchall()


def _counts(rows: list[tuple]) -> dict:
    """{key: count} from rows of key columns then a count; a key of several columns is a tuple."""
    return {(tuple(row[:-1]) if len(row) > 2 else row[0]): float(row[-1]) for row in rows}


@dataclass
class JobsDatabase:
    """What the database says: the job history the API serves (ListJobEvents) and the jobs' states."""

    url: str

    def transitions(self, start: float, end: float) -> list[tuple[str, str, str | None, str, int]]:
        """(tenant, kind, from_state, to_state, attempt) of every state change in [start, end]."""
        return _rows(
            self.url,
            "SELECT e.tenant, j.kind, e.from_state::text, e.to_state::text, e.attempt"
            " FROM job_events e JOIN jobs j USING (job_id) WHERE e.at BETWEEN to_timestamp(%s) AND to_timestamp(%s)",
            start,
            end,
        )

    def attempt_errors(self, start: float, end: float) -> dict[str, float]:
        sql = (
            "SELECT category::text, count(*) FROM job_attempt_errors"
            " WHERE at BETWEEN to_timestamp(%s) AND to_timestamp(%s) GROUP BY 1"
        )
        return _counts(_rows(self.url, sql, start, end))

    def arrivals(self, start: float, end: float) -> dict[str, float]:
        sql = (
            "SELECT kind, count(*) FROM jobs WHERE created_at BETWEEN to_timestamp(%s) AND to_timestamp(%s) GROUP BY 1"
        )
        return _counts(_rows(self.url, sql, start, end))

    def open_jobs(self) -> dict[tuple[str, str], float]:
        sql = "SELECT tenant, state::text, count(*) FROM jobs WHERE state::text = ANY(%s) GROUP BY 1, 2"
        return _counts(_rows(self.url, sql, list(OPEN_STATES)))

    def oldest_waits(self) -> dict[tuple[str, str], float]:
        """docs/METRICS.md's definition: the oldest pending or retry_wait job whose run_after has passed;
        0 where the tenant and kind have such jobs but none is due yet."""
        sql = (
            "SELECT tenant, kind, coalesce(max(extract(epoch FROM now() - run_after))"
            " FILTER (WHERE run_after <= now()), 0) FROM jobs WHERE state IN ('pending', 'retry_wait') GROUP BY 1, 2"
        )
        return _counts(_rows(self.url, sql))

    def in_state(self, state: str, by: str = "tenant") -> dict[str, float]:
        column = {"tenant": "tenant", "kind": "kind"}[by]
        return _counts(_rows(self.url, f"SELECT {column}, count(*) FROM jobs WHERE state = %s GROUP BY 1", state))

    def last_change_at(self) -> float:
        return float(_rows(self.url, "SELECT extract(epoch FROM max(at)) FROM job_events")[0][0])

    def settled(self, open_expected: float) -> bool:
        """Only the jobs left open on purpose are open."""
        return sum(self.open_jobs().values()) == open_expected


@dataclass
class Run:
    """Prometheus as the dashboard asks it, and the database: over the bursts' window [start, end] for
    the counters' panels, over the whole run [first, end] for the ratio rules."""

    prometheus: PrometheusServer
    db: JobsDatabase
    first: float
    start: float
    end: float
    refused_submissions: int
    open_jobs: dict[tuple[str, str], float]
    processes: list[ServiceProcess]
    figures: dict[str, object] = field(default_factory=dict)

    def api_log(self) -> list[str]:
        return self.processes[0].log_text().splitlines()

    def worker_logs(self) -> list[str]:
        return [line for worker in self.processes[1:] for line in worker.log_text().splitlines()]

    @functools.cached_property
    def window(self) -> list[tuple[str, str, str | None, str, int]]:
        return self.db.transitions(self.start, self.end)

    @functools.cached_property
    def whole_run(self) -> list[tuple[str, str, str | None, str, int]]:
        return self.db.transitions(self.first, self.end)

    def area(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        """A graph panel's area by labels over the window: for a rate, the count it stands for."""
        totals: dict[tuple[str, ...], float] = {}
        for series in self.prometheus.query_range(expr, self.start, self.end, SCRAPE_INTERVAL_SECONDS):
            key = tuple(series["metric"].get(label, "") for label in labels)
            values = [float(v) for _, v in series["values"]]
            totals[key] = totals.get(key, 0.0) + sum(v for v in values if math.isfinite(v)) * SCRAPE_INTERVAL_SECONDS
        return totals

    def instant(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(s["metric"].get(n, "") for n in labels): float(s["value"][1]) for s in self.prometheus.query(expr)
        }

    def unseen(self, selector: str, label: str) -> dict[str, float]:
        """What the series of a selector (not an aggregation: each series' own first sample) counted before
        Prometheus first scraped them, over the whole run, by label: rate() never sees it. Only a replica's
        first scrape interval after its first claim of a tenant holds such counts."""
        found: dict[str, float] = {}
        for series in self.prometheus.query_range(selector, self.first, self.end, SCRAPE_INTERVAL_SECONDS):
            key = series["metric"].get(label, "")
            found[key] = found.get(key, 0.0) + float(series["values"][0][1])
        return found


def _claims(transitions: list[tuple], by: int) -> dict[str, float]:
    """Claims by tenant (0) or kind (1), and how many were retries, from the changes into running."""
    found: dict[str, float] = {}
    for row in transitions:
        if row[3] == "running" and row[2] != "running":
            found[row[by]] = found.get(row[by], 0.0) + 1
    return found


def _retries(transitions: list[tuple]) -> dict[str, float]:
    return _claims([row for row in transitions if row[4] > 1], by=0)


_OUTCOME_OF = {
    "succeeded": "succeeded",
    "failed": "failed",
    "outcome_unknown": "outcome_unknown",
    "retry_wait": "retried",
    "cancelled": "cancelled",
}


def _outcomes(transitions: list[tuple], tenant: str | None = None) -> dict[str, float]:
    """Attempts that ended, by the workers' outcome label, from the changes out of running."""
    found: dict[str, float] = {}
    for row_tenant, _, from_state, to_state, _ in transitions:
        if from_state == "running" and to_state != "running" and tenant in (None, row_tenant):
            found[_OUTCOME_OF[to_state]] = found.get(_OUTCOME_OF[to_state], 0.0) + 1
    return found


def _close(measured: float, expected: float) -> bool:
    low = expected * (1 - AREA_ZERO_START_SHARE) - AREA_ABSOLUTE_SLACK
    return low <= measured <= expected * (1 + AREA_RELATIVE_SLACK) + AREA_ABSOLUTE_SLACK


def _assert_areas(panel: str, measured: dict[tuple[str, ...], float], expected: dict) -> None:
    expected = {key if isinstance(key, tuple) else (key,): value for key, value in expected.items()}
    keys = {k for k, v in expected.items() if v} | {k for k, v in measured.items() if abs(v) > AREA_ABSOLUTE_SLACK}
    pairs = {k: (round(measured.get(k, 0.0), 2), expected.get(k, 0.0)) for k in keys}
    wrong = {k: pair for k, pair in pairs.items() if not _close(*pair)}
    assert not wrong, f"{panel}: (panel, database) differ for {wrong}"


# ---- The checks, one per query of the dashboard ----


def _check_claims(run: Run, expr: str) -> None:
    _assert_areas("Throughput: claimed", run.area(expr), {(): sum(_claims(run.window, by=0).values())})


def _check_outcomes(run: Run, expr: str) -> None:
    _assert_areas("Throughput: outcomes", run.area(expr, "outcome"), _outcomes(run.window))


def _check_failures_by_category(run: Run, expr: str) -> None:
    stored = run.db.attempt_errors(run.start, run.end)
    shown = run.area(expr, "category")
    run.figures["failed attempts in the bursts by category: the API's history"] = stored
    run.figures["failed attempts in the bursts by category: the panel's area"] = {
        k[0]: round(v, 2) for k, v in shown.items()
    }
    assert set(shown) == {("retryable",), ("permanent",), ("outcome_unknown",)}, "a line per category, at 0 too"
    _assert_areas("Failures by category", shown, stored)


def _check_arrivals(run: Run, expr: str) -> None:
    _assert_areas("Arrivals by kind", run.area(expr, "kind"), run.db.arrivals(run.start, run.end))


def _check_claims_by_kind(run: Run, expr: str) -> None:
    _assert_areas("Claims by kind", run.area(expr, "kind"), _claims(run.window, by=1))


def _check_queue_depth(run: Run, expr: str) -> None:
    wait_until(
        lambda: run.instant(expr, "tenant", "state") == run.open_jobs,
        timeout=15,
        interval=0.2,
        what=f"the queue depth panel to read {run.open_jobs}",
    )


def _check_oldest_wait(run: Run, expr: str) -> None:
    shown = run.instant(expr, "tenant", "kind")
    stored = run.db.oldest_waits()
    run.figures["oldest runnable wait in s (panel, database)"] = {
        "/".join(key): (round(shown.get(key, math.nan), 1), round(age, 1)) for key, age in stored.items()
    }
    assert set(shown) == set(stored), run.figures
    assert all(abs(shown[key] - age) <= GAUGE_AGE_SLACK_SECONDS for key, age in stored.items()), run.figures


def _check_retry_rate(run: Run, expr: str) -> None:
    shown = run.prometheus.values_by(expr, "tenant")
    claims, retries = _claims(run.whole_run, by=0), _retries(run.whole_run)
    unseen = run.unseen("jobs_claimed_total", "tenant")
    visible = {t: retries.get(t, 0.0) / (n - unseen.get(t, 0.0)) for t, n in claims.items()}
    run.figures["retry rate (rule; the database; the database less what rate() cannot see)"] = {
        t: (round(shown.get(t, math.nan), 4), round(retries.get(t, 0.0) / n, 4), round(visible[t], 4))
        for t, n in claims.items()
    }
    run.figures["claims before their series' first scrape, by tenant"] = unseen
    assert set(shown) == set(claims), run.figures
    assert all(abs(shown[t] - visible[t]) <= RATIO_RELATIVE_SLACK * visible[t] for t in claims), run.figures


def _check_failure_ratio(run: Run, expr: str) -> None:
    shown = run.prometheus.values_by(expr, "tenant")
    unseen = run.unseen('jobs_completed_total{outcome="succeeded"}', "tenant")
    figures = {}
    visible = {}
    for tenant in ("acme", "globex"):
        outcomes = _outcomes(run.whole_run, tenant)
        bad = outcomes.get("failed", 0.0) + outcomes.get("outcome_unknown", 0.0)
        ended = bad + outcomes.get("succeeded", 0.0)
        visible[tenant] = bad / (ended - unseen.get(tenant, 0.0))
        figures[tenant] = (round(shown.get(tenant, math.nan), 4), f"{bad:.0f}/{ended:.0f}", round(visible[tenant], 4))
    run.figures["failure ratio (rule; the API's failed/ended; less what rate() cannot see)"] = figures
    run.figures["successes before their series' first scrape, by tenant"] = unseen
    assert set(shown) == {"acme", "globex"}, f"a tenant with finished jobs has no failure ratio: {figures}"
    assert shown["globex"] == 0, "no failure: the ratio reads 0"
    assert abs(shown["acme"] - visible["acme"]) <= RATIO_RELATIVE_SLACK * visible["acme"], figures


def _check_recently_failed(run: Run, expr: str) -> None:
    assert run.prometheus.values_by(expr, "tenant") == run.db.in_state("failed")


def _check_outcome_unknown(run: Run, expr: str) -> None:
    assert run.prometheus.values_by(expr, "tenant") == run.db.in_state("outcome_unknown")


def _check_fenced_rejections(run: Run, expr: str) -> None:
    # No report of the bursts was refused (the API logs each refusal); every reason has its line, at 0.
    refusals = [line for line in run.api_log() if "refused" in line and "heartbeat refused" not in line]
    assert not refusals, refusals
    reasons = ("LEASE_LOST", "JOB_CANCELLED", "JOB_SUPERSEDED", "RESOURCE_DELETED")
    assert run.area(expr, "reason") == {(reason,): 0.0 for reason in reasons}


def _check_leases_lost(run: Run, expr: str) -> None:
    lost = [line for line in run.worker_logs() if "lease" in line and ("refused" in line or "expired" in line)]
    assert not lost, lost
    assert run.area(expr) == {(): 0.0}


def _check_percentile(histogram: str, highest: float) -> Callable[[Run, str], None]:
    def check(run: Run, expr: str) -> None:
        series = run.prometheus.query_range(expr, run.start, run.end, SCRAPE_INTERVAL_SECONDS)
        drawn = [float(v) for s in series for _, v in s["values"] if math.isfinite(float(v))]
        # The bursts' jobs (echo, flaky and its retries) wait a few seconds at most and run for milliseconds.
        assert drawn and all(0 <= v <= highest for v in drawn), (expr, drawn)
        # The histogram under the panel counts every claim (queue wait) or every ended attempt (execution).
        observed = run.area(f"sum(rate({histogram}_count[4s]))")
        transitions = _claims(run.window, 0) if "queue" in histogram else _outcomes(run.window)
        _assert_areas(histogram, observed, {(): sum(transitions.values())})

    return check


def _check_grpc_requests(run: Run, expr: str) -> None:
    shown = {k: v for k, v in run.area(expr, "grpc_service", "grpc_code").items() if v > AREA_ABSOLUTE_SLACK}
    run.figures["refused submissions (the test's calls, the panel's area)"] = (
        run.refused_submissions,
        round(shown.get(("jobs.v1.JobService", "INVALID_ARGUMENT"), 0.0), 2),
    )
    assert _close(shown.get(("jobs.v1.JobService", "INVALID_ARGUMENT"), 0.0), run.refused_submissions), shown
    assert not [k for k in shown if k[1] in ("UNKNOWN", "INTERNAL", "UNAVAILABLE", "DATA_LOSS")], shown
    assert shown.get(("jobs.v1.WorkerService", "OK"), 0) > 0, shown


def _check_drawn_within(low: float, high: float) -> Callable[[Run, str], None]:
    def check(run: Run, expr: str) -> None:
        series = run.prometheus.query_range(expr, run.start, run.end, SCRAPE_INTERVAL_SECONDS)
        drawn = [float(v) for s in series for _, v in s["values"] if math.isfinite(float(v))]
        assert drawn and all(low <= v <= high for v in drawn), (expr, drawn[:20])

    return check


def _check_in_flight(run: Run, expr: str) -> None:
    shown = run.instant(expr, "instance")
    assert len(shown) == 2 and sum(shown.values()) == sum(run.db.in_state("running").values()), shown


def _check_heartbeats(run: Run, expr: str) -> None:
    # A heartbeat every third of a lease: a 4-second window holds one only now and then.
    drawn: dict[str, list[float]] = {}
    for series in run.prometheus.query_range(expr, run.first, run.end, SCRAPE_INTERVAL_SECONDS):
        values = [float(v) for _, v in series["values"] if math.isfinite(float(v))]
        drawn.setdefault(series["metric"]["instance"], []).extend(values)
    assert len(drawn) == 2 and all(v and all(0 < x < 5 for x in v) for v in drawn.values()), drawn


def _check_pool_open(run: Run, expr: str) -> None:
    sessions = _counts(_rows(run.db.url, "SELECT application_name, count(*) FROM pg_stat_activity GROUP BY 1"))
    shown = run.instant(expr, "job", "instance")
    assert sorted(job for job, _ in shown) == ["jobs-api", "jobs-worker", "jobs-worker"], shown
    # The pool's connections, within the sessions of its kind of process (application_name is the job's
    # name), beside which are LISTEN and the exporter lock's.
    assert all(1 <= value <= sessions[job] for (job, _), value in shown.items()), (shown, sessions)


def _check_pool_waiting(run: Run, expr: str) -> None:
    assert set(run.instant(expr, "job", "instance").values()) == {0.0}


def _check_pool_wait_time(run: Run, expr: str) -> None:
    shown = run.instant(expr, "job")
    assert set(shown) == {("jobs-api",), ("jobs-worker",)} and all(v >= 0 for v in shown.values()), shown


def _check_exporter(run: Run, expr: str) -> None:
    assert run.instant(expr) == {(): 1.0}, "one API replica exports the database gauges"


def _check_snapshot_age(run: Run, expr: str) -> None:
    ((age,),) = [tuple(run.instant(expr).values())]
    assert 0 <= age < GAUGE_AGE_SLACK_SECONDS, age


def _check_per_process(least: float) -> Callable[[Run, str], None]:
    def check(run: Run, expr: str) -> None:
        shown = run.instant(expr, "job", "instance")
        assert sorted(job for job, _ in shown) == ["jobs-api", "jobs-worker", "jobs-worker"], shown
        assert all(v >= least for v in shown.values()), shown

    return check


def _check_versions(run: Run, expr: str) -> None:
    shown = run.instant(expr, "component")
    assert shown == {("api",): 1.0, ("worker",): 2.0}, shown


def _check_key_running(run: Run, expr: str) -> None:
    assert run.instant(expr, "key") == {("kind:sleep",): run.db.in_state("running", by="kind")["sleep"]}


def _check_key_limit(run: Run, expr: str) -> None:
    assert run.instant(expr, "key") == {("kind:sleep",): 1.0}, "the limit the operator set"


def _check_throttled(run: Run, expr: str) -> None:
    assert run.instant(expr, "key") == {("kind:sleep",): run.db.in_state("pending", by="kind")["sleep"]}


PANEL_CHECKS: dict[tuple[str, str], Callable[[Run, str], None]] = {
    ("Queue depth by tenant and state", "A"): _check_queue_depth,
    ("Oldest runnable wait", "A"): _check_oldest_wait,
    ("Retry rate by tenant", "A"): _check_retry_rate,
    ("Throughput", "A"): _check_claims,
    ("Throughput", "B"): _check_outcomes,
    ("Failures by category", "A"): _check_failures_by_category,
    ("Failure ratio by tenant", "A"): _check_failure_ratio,
    ("Arrivals and claims by kind", "A"): _check_arrivals,
    ("Arrivals and claims by kind", "B"): _check_claims_by_kind,
    ("FAILED (recent window) and OUTCOME_UNKNOWN jobs", "A"): _check_recently_failed,
    ("FAILED (recent window) and OUTCOME_UNKNOWN jobs", "B"): _check_outcome_unknown,
    ("Fenced rejections and lost leases", "A"): _check_fenced_rejections,
    ("Fenced rejections and lost leases", "B"): _check_leases_lost,
    **{("Queue wait percentiles", ref): _check_percentile("jobs_queue_wait_seconds", 10.0) for ref in "ABC"},
    **{("Execution time percentiles", ref): _check_percentile("jobs_execution_seconds", 0.5) for ref in "ABC"},
    ("gRPC requests by service and code", "A"): _check_grpc_requests,
    ("gRPC p99 handling time by method", "A"): _check_drawn_within(0, 10),
    ("Jobs in flight and claim batch size", "A"): _check_in_flight,
    ("Jobs in flight and claim batch size", "B"): _check_drawn_within(0, 4),
    ("Heartbeat round trip p99", "A"): _check_heartbeats,
    ("Database pool", "A"): _check_pool_open,
    ("Database pool", "B"): _check_pool_waiting,
    ("Database pool", "C"): _check_pool_wait_time,
    ("Database gauges: exporter and snapshot age", "A"): _check_exporter,
    ("Database gauges: exporter and snapshot age", "B"): _check_snapshot_age,
    ("Resident memory by process", "A"): _check_per_process(10e6),
    ("CPU by process", "A"): _check_per_process(0),
    ("Versions running", "A"): _check_versions,
    ("Running per key against its limit", "A"): _check_key_running,
    ("Running per key against its limit", "B"): _check_key_limit,
    ("Throttled jobs per key", "A"): _check_throttled,
}


def _check_every_panel(run: Run) -> None:
    """Each query of the dashboard with its variables substituted as Grafana does (All tenants, All kinds,
    the last five minutes), against the database, or what the run did where the database keeps nothing."""
    dashboard = load_dashboard()
    variables = variable_queries(dashboard)
    tenants = {t for (t,) in _rows(run.db.url, "SELECT DISTINCT tenant FROM jobs")}
    assert run.prometheus.label_values(variables["tenant"]) == tenants
    published = {k for (k,) in _rows(run.db.url, "SELECT kind FROM job_kinds WHERE retired_at IS NULL")}
    assert run.prometheus.label_values(variables["kind"]) == published, "every published kind, run or not"
    queries = panel_queries(dashboard)
    assert {(q.panel, q.ref_id) for q in queries} == set(PANEL_CHECKS), "a query without its check, or the reverse"
    for query in queries:
        selected: dict[str, list[str] | None] = {"tenant": None, "kind": None}
        expr = substitute(
            dashboard,
            query.expr,
            selected=selected,
            range_seconds=DASHBOARD_RANGE_SECONDS,
            scrape_seconds=SCRAPE_INTERVAL_SECONDS,
        )
        PANEL_CHECKS[(query.panel, query.ref_id)](run, expr)


def _check_every_ratio(run: Run) -> None:
    """Every ratio rule has a value, 0 where nothing went wrong, wherever its denominator is above 0."""
    prometheus = run.prometheus
    called = prometheus.query("sum by (grpc_service, grpc_method) (rate(grpc_server_handled_total[5m])) > 0")
    ratios = prometheus.query("grpc_service_method:grpc_server_errors:ratio_rate5m")
    methods = {(s["metric"]["grpc_service"], s["metric"]["grpc_method"]) for s in called}
    assert {(s["metric"]["grpc_service"], s["metric"]["grpc_method"]) for s in ratios} == methods
    assert {float(s["value"][1]) for s in ratios} == {0.0}, ratios
    assert prometheus.values_by("jobs_lease_loss:ratio_rate5m", "") == {"": 0.0}
    claimed = set(prometheus.values_by("sum by (tenant) (rate(jobs_claimed_total[5m])) > 0", "tenant"))
    for rule in ("tenant:jobs_retry_rate:ratio_rate5m", "tenant:jobs_failure:ratio_rate5m"):
        assert set(prometheus.values_by(rule, "tenant")) == claimed, rule
    run.figures["gRPC methods called in 5 minutes / with an error ratio (all 0)"] = (len(methods), len(ratios))


def _label_sets(prometheus: PrometheusServer, at: float) -> set[tuple]:
    selector = '{__name__=~"' + "|".join(RATED_COUNTERS) + '"}'
    return {tuple(sorted(s["metric"].items())) for s in prometheus.query(selector, at=at)}


def _warm_up(stack: ServiceStack, prometheus: PrometheusServer, db: JobsDatabase) -> None:
    """A replica learns a tenant at its first claim of the tenant's jobs: a few echo jobs at a time until
    each of the two replicas has claimed for both tenants, and Prometheus has scraped that."""
    for _ in range(WARM_UP_ROUNDS_MAX):
        for tenant in stack.tenants:
            stack.tenant(tenant).submit_many(_echo(2))
        wait_until(lambda: db.settled(0), timeout=20, interval=0.1, what="the warm-up's jobs")
        if len(prometheus.query("sum by (instance, tenant) (jobs_claimed_total) > 0")) == 2 * len(stack.tenants):
            return
    pytest.fail("the two replicas did not both claim jobs of both tenants")


def _settle(prometheus: PrometheusServer, db: JobsDatabase) -> float:
    """Waits until every rate window has passed the last change, and returns that time."""
    prometheus.wait_for_evaluation_after(db.last_change_at() + SETTLED_AFTER_SECONDS, "tenant_kind:jobs_claimed:rate5m")
    return time.time()


def _leave_jobs_waiting(stack: ServiceStack) -> list[str]:
    """Jobs left open on purpose, one of each way of waiting: not due yet, blocked behind it, of a paused
    kind, and held back by a limit (one of three sleep jobs runs). Returns the sleep jobs' ids."""
    acme, globex = stack.tenant("acme"), stack.tenant("globex")
    later = timestamp_pb2.Timestamp()
    later.FromSeconds(int(time.time()) + 3600)
    (not_due,) = globex.submit_many(_echo(1, run_after=later)).results
    globex.submit_many(_echo(1, depends_on=[not_due.job.job_id]))
    acme.submit_many([jobs_pb2.SubmitJobRequest(kind="summarize", payload=b"text") for _ in range(2)])
    sleeping = [jobs_pb2.SubmitJobRequest(kind="sleep", payload=b'{"seconds": 300}') for _ in range(3)]
    return [result.job.job_id for result in globex.submit_many(sleeping).results]


def test_every_panel_and_ratio_agrees_with_the_database_after_bursts_of_failures_on_fresh_replicas(
    service_stack: ServiceStack, start_prometheus
) -> None:
    api = service_stack.start_api(JOBS_METRICS_REFRESH_SECONDS="1")
    # Leases of the default length: the fault tests' two seconds can run out on a busy machine, and a
    # lost lease is not what this test is about.
    workers = [
        service_stack.start_worker(name, JOBS_WORKER_CONCURRENCY="4", JOBS_LEASE_SECONDS="30") for name in ("w1", "w2")
    ]
    prometheus = start_prometheus(api, workers)
    db = JobsDatabase(service_stack.database_url)
    wait_until(
        lambda: len(prometheus.query("up == 1")) == 3 and prometheus.query('jobs_submitted_total{tenant="acme"}'),
        timeout=15,
        interval=0.2,
        what="prometheus to scrape the three processes, the arrival series at 0",
    )
    first = time.time()
    admin = service_stack.admin()
    admin.stub.PauseKind(admin_pb2.PauseKindRequest(kind="summarize", reason="test"), metadata=admin.metadata)
    limit = admin_pb2.SetLimitRequest(key="kind:sleep", max_running=1, burst=1)
    admin.stub.SetLimit(limit, metadata=admin.metadata)
    _warm_up(service_stack, prometheus, db)
    start = _settle(prometheus, db)
    series_before = _label_sets(prometheus, start)

    # The bursts, on replicas seconds old: acme's first attempts end FAILED or OUTCOME_UNKNOWN.
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    acme.submit_many(
        [_flaky("permanent", 1) for _ in range(BURST_PERMANENT)]
        + [_flaky("unknown", 1) for _ in range(BURST_OUTCOME_UNKNOWN)]
        + [_flaky("retryable", 1) for _ in range(6)]
        + _echo(BURST_SUCCEEDING)
    )
    globex.submit_many([_flaky("retryable", 2) for _ in range(3)] + _echo(BURST_SUCCEEDING))
    refused = 0
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as caught:
            acme.submit("no.such.kind")
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        refused += 1
    wait_until(lambda: db.settled(BURST_OUTCOME_UNKNOWN), timeout=40, interval=0.2, what="the bursts to end")
    sleeping = _leave_jobs_waiting(service_stack)
    wait_until(lambda: db.in_state("running") == {"globex": 1.0}, timeout=20, what="one sleep job to run")
    open_jobs = db.open_jobs()
    assert sum(open_jobs.values()) == BURST_OUTCOME_UNKNOWN + 2 + 2 + 3, open_jobs
    end = _settle(prometheus, db)

    born = _label_sets(prometheus, end) - series_before
    assert not born, f"series born during the bursts, whose first counts rate() cannot see: {sorted(born)}"
    run = Run(prometheus, db, first, start, end, refused, open_jobs, [api, *workers])
    try:
        _check_every_panel(run)
        _check_every_ratio(run)
    finally:
        print("\n" + "\n".join(f"{name}: {value}" for name, value in run.figures.items()))
    for job_id in sleeping:
        globex.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), metadata=globex.metadata)
