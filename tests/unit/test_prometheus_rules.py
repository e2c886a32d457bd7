"""The shipped Prometheus rules: valid, and their unit tests (deploy/prometheus/tests) pass.

promtool comes from Debian's prometheus package (`make system-deps`). Without it these tests fail
rather than skip: rules nobody checked must not ship green.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.metric_catalog import RULES, exported_sample_names, metric_names, rule_names

pytestmark = pytest.mark.timeout(60)

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
EXAMPLE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULE_TESTS = sorted((PROMETHEUS_DIR / "tests").glob("*.yaml"))


def promtool(*args: str) -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not on PATH; install it with `make system-deps` (Debian's prometheus package)")
    completed = subprocess.run([binary, *args], capture_output=True, text=True, timeout=50)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def test_rules_are_valid() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(RULES))


def test_example_scrape_config_is_valid_and_loads_the_rules() -> None:
    output = promtool("check", "config", str(EXAMPLE_CONFIG))
    assert "1 rule files found" in output


def test_rule_unit_tests_pass() -> None:
    assert RULE_TESTS, "no promtool rule tests found"
    promtool("test", "rules", *map(str, RULE_TESTS))


def test_every_alert_and_the_retry_rate_rule_have_a_unit_test() -> None:
    alerts = rule_names("alert")
    tested = "\n".join(path.read_text() for path in RULE_TESTS)
    assert alerts, "rules.yaml defines no alerts"
    untested = sorted(a for a in alerts if f"alertname: {a}" not in tested)
    assert not untested, f"alerts without a promtool test: {untested}"
    assert "expr: tenant:jobs_retry_rate:ratio_rate5m" in tested


def test_every_alert_has_a_summary_and_a_runbook() -> None:
    blocks = RULES.read_text().split("- alert:")[1:]
    for block in blocks:
        name = block.split()[0]
        assert "summary:" in block, f"{name} has no summary"
        assert "runbook:" in block, f"{name} has no runbook line"


def rule_expressions() -> list[str]:
    """Every `expr:` of rules.yaml, block scalars (`expr: |`) included."""
    lines = RULES.read_text().splitlines()
    found = []
    for index, line in enumerate(lines):
        key, _, value = line.strip().partition(":")
        if key != "expr":
            continue
        if value.strip() != "|":
            found.append(value.strip())
            continue
        indent = len(line) - len(line.lstrip())
        block = []
        for following in lines[index + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following.strip())
        found.append(" ".join(block))
    return found


def test_rules_read_only_metrics_the_services_export() -> None:
    known = exported_sample_names() | rule_names("record")
    expressions = rule_expressions()
    assert len(expressions) == len(rule_names("record")) + len(rule_names("alert"))
    unknown = sorted({name for expr in expressions for name in metric_names(expr)} - known)
    assert not unknown, f"rules read metrics nothing exports: {unknown}"
