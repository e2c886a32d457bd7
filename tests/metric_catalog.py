"""What the services export and what the shipped rules record, for checking the dashboard and the
rules against: metric names come from the metric classes themselves, never from a hand-kept list."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from api_service.metrics import ApiMetrics
from api_service.queue_gauges import QueueSnapshot
from worker_service.metrics import WorkerMetrics

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "rules.yaml"

# A Grafana variable query: the series selector, then the label whose values it lists.
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.DOTALL)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME_MATCHER = re.compile(r'__name__\s*=~?\s*"([^"]*)"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_IDENTIFIER = re.compile(r"(?<![\w:$])([A-Za-z_:][\w:]*)\b(?!\s*\()")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a label_values variable query) reads: bare selectors
    plus __name__ matchers."""
    label_values = _LABEL_VALUES.match(expr)
    if label_values:
        expr = label_values[1]
    names = {n for m in _NAME_MATCHER.findall(expr) for n in m.split("|")}
    text = _STRING.sub('""', expr)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = _MATCHERS.sub("", text)
    names |= {n for n in _IDENTIFIER.findall(text) if n.lower() not in _KEYWORDS}
    return names


def exported_sample_names() -> set[str]:
    """Every sample name the API and the worker can export, from their own metric classes."""
    api = ApiMetrics()
    api.watch_pool(dict)
    api.queue.publish(QueueSnapshot({}, {}, {}), 0.0, valid_until=float("inf"))  # the exporter's families too
    worker = WorkerMetrics(tenant_limit=5)
    worker.watch_pool(dict)
    return _sample_names(api.registry) | _sample_names(worker.registry)


def _sample_names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def rule_names(kind: str) -> set[str]:
    """The names after `- alert:` or `- record:` in rules.yaml."""
    prefix = f"- {kind}:"
    lines = (line.strip() for line in RULES.read_text().splitlines())
    return {line.removeprefix(prefix).strip() for line in lines if line.startswith(prefix)}
