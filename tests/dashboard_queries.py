"""The shipped dashboard's queries with their variables substituted the way Grafana substitutes them,
for tests that ask a real Prometheus what each panel shows."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "dashboards" / "jobs.json"
# Grafana's kbn.roundInterval, up to a minute: (below this many seconds, use this interval).
_ROUNDED_INTERVALS = (
    (0.015, 0.01),
    (0.035, 0.02),
    (0.075, 0.05),
    (0.15, 0.1),
    (0.35, 0.2),
    (0.75, 0.5),
    (1.5, 1.0),
    (3.5, 2.0),
    (7.5, 5.0),
    (12.5, 10.0),
    (17.5, 15.0),
    (25.0, 20.0),
    (45.0, 30.0),
    (90.0, 60.0),
)
# The width of a panel in pixels, which Grafana takes as its most data points.
MAX_DATA_POINTS = 1000


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref_id: str
    expr: str
    legend: str
    exemplar: bool


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every panel with queries, rows' nested panels included."""
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return [p for p in found if p["type"] != "row"]


def panel_queries(dashboard: dict) -> list[PanelQuery]:
    return [
        PanelQuery(p["title"], t["refId"], t["expr"], t.get("legendFormat", ""), bool(t.get("exemplar")))
        for p in panels(dashboard)
        for t in p["targets"]
    ]


def variable_queries(dashboard: dict) -> dict[str, str]:
    """The query variables' definitions (label_values(...)), by name."""
    return {v["name"]: v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"}


def grafana_intervals(range_seconds: float, scrape_seconds: float) -> tuple[float, float]:
    """$__interval and $__rate_interval for a time range, as Grafana computes them for a Prometheus data
    source whose scrape interval is set: the range over the panel's points, rounded, never below the
    scrape interval; and the rate interval max($__interval + scrape, 4 × scrape)."""
    raw = range_seconds / MAX_DATA_POINTS
    interval = next((rounded for below, rounded in _ROUNDED_INTERVALS if raw < below), 60.0)
    interval = max(interval, scrape_seconds)
    return interval, max(interval + scrape_seconds, 4 * scrape_seconds)


def _duration(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


def _variable_value(values: Sequence[str] | None, all_value: str) -> str:
    """Grafana's Prometheus formatting: All is the variable's allValue; one value regex-escaped; several
    as (a|b)."""
    if values is None:
        return all_value
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(
    dashboard: dict,
    expr: str,
    *,
    selected: Mapping[str, Sequence[str] | None],
    range_seconds: float,
    scrape_seconds: float,
) -> str:
    """The expression Grafana sends: `selected` maps each variable to its values (None: All)."""
    interval, rate_interval = grafana_intervals(range_seconds, scrape_seconds)
    all_values = {v["name"]: v.get("allValue") or ".*" for v in dashboard["templating"]["list"]}
    text = expr
    for name, values in selected.items():
        value = _variable_value(values, all_values[name])
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    text = text.replace("$__rate_interval", _duration(rate_interval))
    text = text.replace("$__interval", _duration(interval))
    text = text.replace("$__range", _duration(range_seconds))
    assert "$" not in text, f"a variable left unsubstituted in {text}"
    return text
