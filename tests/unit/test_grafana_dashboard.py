"""The shipped Grafana dashboard: stable identity, the variables operators filter by, the panels they
look at first, and no query naming a metric that nothing exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.metric_catalog import exported_sample_names, metric_names, rule_names

pytestmark = pytest.mark.timeout(30)

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "dashboards" / "jobs.json"
# Links and provisioning point at this uid; changing it breaks every bookmark.
DASHBOARD_UID = "jobs-overview"
REQUIRED_PANELS = (
    "Queue depth by tenant and state",
    "Oldest runnable wait",
    "Retry rate by tenant",
    "Throughput",
    "Arrivals and claims by kind",
    "Queue wait percentiles",
    "Execution time percentiles",
    "Failures by category",
    "Fenced rejections and lost leases",
    "Resident memory by process",
    "Versions running",
)


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict) -> list[dict]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return [p for p in found if p["type"] != "row"]


def test_the_dashboard_has_a_stable_uid_and_a_datasource_tenant_and_kind_variable(dashboard: dict) -> None:
    assert dashboard["uid"] == DASHBOARD_UID
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("tenant", "kind"):
        assert variables[name]["type"] == "query"
        assert variables[name]["includeAll"] and variables[name]["multi"]
        assert variables[name]["datasource"]["uid"] == "${datasource}"


def test_the_panels_operators_look_at_are_there_and_use_the_datasource_variable(dashboard: dict) -> None:
    panels = _panels(dashboard)
    titles = [p["title"] for p in panels]
    missing = [t for t in REQUIRED_PANELS if t not in titles]
    assert not missing, f"missing panels: {missing}"
    assert titles[:3] == list(REQUIRED_PANELS[:3]), "queue depth, oldest wait and retry rate come first"
    assert len({p["id"] for p in panels}) == len(panels), "panel ids must be unique"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_names_only_exported_metrics_or_shipped_recording_rules(dashboard: dict) -> None:
    known = exported_sample_names() | rule_names("record")
    queries = [(p["title"], t["expr"]) for p in _panels(dashboard) for t in p["targets"]]
    queries += [
        (f"variable {v['name']}", v["definition"]) for v in dashboard["templating"]["list"] if v["type"] == "query"
    ]
    unknown = {(title, name) for title, expr in queries for name in metric_names(expr) if name not in known}
    assert not unknown, f"queries name metrics nothing exports: {sorted(unknown)}"
    assert all(metric_names(expr) for _, expr in queries), "every query reads at least one metric"


def test_the_metric_name_parser_reads_selectors_and_skips_functions_labels_and_variables() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, kind) (rate(jobs_queue_wait_seconds_bucket{kind=~"$kind"}'
        "[$__rate_interval]))) / on (kind) group_left tenant:jobs_retry_rate:ratio_rate5m > bool 0"
    )
    assert metric_names(expr) == {"jobs_queue_wait_seconds_bucket", "tenant:jobs_retry_rate:ratio_rate5m"}
    assert metric_names('label_values({__name__=~"a_total|b"}, tenant)') == {"a_total", "b"}


def test_the_latency_panels_ask_for_exemplars_and_nothing_else_does(dashboard: dict) -> None:
    """A point on a latency line links to the trace of an attempt in that bucket (docs/METRICS.md)."""
    asking = {p["title"] for p in _panels(dashboard) for t in p["targets"] if t.get("exemplar")}
    assert asking == {"Queue wait percentiles", "Execution time percentiles"}
    for panel in _panels(dashboard):
        if panel["title"] in asking:
            assert all(t.get("exemplar") for t in panel["targets"]), panel["title"]
            assert all("_bucket" in t["expr"] for t in panel["targets"]), "exemplars ride on the buckets"


def test_only_panels_whose_zero_lines_say_nothing_hide_them(dashboard: dict) -> None:
    hiding = set()
    for panel in _panels(dashboard):
        for override in panel.get("fieldConfig", {}).get("overrides", []):
            matcher = override["matcher"]
            if matcher["id"] == "byValue" and matcher["options"].get("reducer") == "allIsZero":
                assert override["properties"][0]["value"] == {"legend": True, "tooltip": True, "viz": True}
                hiding.add(panel["title"])
    # Failures by category keeps its lines at 0: no failure is what the operator looks for there.
    assert hiding == {"Throughput", "gRPC requests by service and code"}
