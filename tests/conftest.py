"""Shared fixtures and the test tiers. Database fixtures (a migrated template per session, a fresh clone
per test) live in tests/db_fixtures.py, the service processes' in tests/process_fixtures.py.

Every test file sits in the folder of its tier, named after what its tests need (tests/README.md):
unit (nothing), integration (a database), process (the real services as processes), stack (whole-stack
scenarios). Each test is marked with its tier; a unit test may not use a database, and in the integration
tier `service_stack` runs the services in the test process, so `make test-fast` (unit and integration)
never starts a service process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = (
    "tests.db_fixtures",
    "tests.process_fixtures",
    "tests.in_process_services",
    "tests.database_roles",
    "tests.prometheus_server",
    "tests.otlp_receiver",
    # After the modules it imports, so that pytest rewrites their asserts.
    "tests.suite_server",
)

TESTS_DIR = Path(__file__).resolve().parent
# Each tier, lightest first, with the fixtures that would make one of its tests need a heavier tier.
# In tests/integration, `service_stack` is the in-process stack (tests/integration/conftest.py), so
# only the unit tier has fixtures to refuse.
TIER_FORBIDDEN_FIXTURES = {
    "unit": {"test_databases", "service_stack", "in_process_stack"},
    "integration": set(),
    "process": set(),
    "stack": set(),
}
TIER_RUN_ORDER = ("stack", "process", "integration", "unit")
# The files whose tests take a minute or more each, longest first: pytest-xdist hands the first tests out
# one per worker in turn, and a worker runs what it was handed in order, so these start at once on
# different workers instead of queueing behind each other and ending the run alone.
LONGEST_FIRST = (
    "stack/test_postgres_restart.py",
    "stack/test_chaos.py",
    "process/test_hostile_requests.py",
    "stack/test_failover.py",
    "process/test_fault_injection_e2e.py",
    "stack/test_dashboard_against_database.py",
    "process/test_user_code.py",
)


def _run_order(item: pytest.Item) -> tuple[int, int]:
    relative = item.path.resolve().relative_to(TESTS_DIR)
    if relative.as_posix() in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(relative.as_posix()))
    return (1, TIER_RUN_ORDER.index(relative.parts[0]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        relative = item.path.resolve().relative_to(TESTS_DIR)
        tier = relative.parts[0] if len(relative.parts) > 1 else None
        if tier not in TIER_FORBIDDEN_FIXTURES:
            misplaced.append(f"{item.nodeid}: not in a tier folder ({', '.join(TIER_FORBIDDEN_FIXTURES)})")
            continue
        item.add_marker(getattr(pytest.mark, tier))
        heavier = TIER_FORBIDDEN_FIXTURES[tier] & set(getattr(item, "fixturenames", ()))
        if heavier:
            misplaced.append(f"{item.nodeid}: uses {', '.join(sorted(heavier))}, which the {tier} tier may not")
    if misplaced:
        raise pytest.UsageError("tests outside their tier (see tests/README.md):\n  " + "\n  ".join(misplaced))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The longest files, then the heaviest tier first, so that parallel workers do not end on a lone
        # minute-long scenario. Every worker sorts its collection alike, as pytest-xdist requires.
        items.sort(key=_run_order)
