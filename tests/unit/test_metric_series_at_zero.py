"""Every counter a rule or panel takes a rate of exists at 0 from the moment its labels are known:
rate() cannot see what a series counted before its first scrape, so a series born at its first
failure hides that failure. Workers: the kinds they publish, and each tenant from its first claim.
API: every method with every status code, and the principals file's tenants with the published kinds."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import grpc
import pytest

from api_service.metrics import COUNTED_METHODS, ApiMetrics, SubmissionMetrics, keep_arrival_series
from api_service.principals import PrincipalDirectory
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import ClaimedJob
from shared.metric_labels import OTHER_TENANT_LABEL
from tests.conditions import wait_until
from worker_service.metrics import FAILURE_CATEGORIES, AttemptOutcome, WorkerMetrics

pytestmark = pytest.mark.timeout(30)

KINDS = ("echo", "flaky")


def _value(metrics: WorkerMetrics | ApiMetrics | SubmissionMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def _claimed(tenant: str, kind: str, *, attempt: int) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(JobId("j"), TenantId(tenant), kind, b"", attempt, 3, FencingToken(attempt), now, now, now, now)


def test_a_claim_is_counted_per_tenant_and_kind_with_its_retries() -> None:
    metrics = WorkerMetrics(tenant_limit=5)
    metrics.know_kinds(KINDS)

    metrics.count_claims(
        [
            _claimed("acme", "echo", attempt=1),
            _claimed("acme", "echo", attempt=3),
            _claimed("globex", "flaky", attempt=1),
        ]
    )

    assert _value(metrics, "jobs_claimed_total", tenant="acme", kind="echo") == 2
    assert _value(metrics, "jobs_retries_total", tenant="acme", kind="echo") == 1
    assert _value(metrics, "jobs_claimed_total", tenant="globex", kind="flaky") == 1
    assert _value(metrics, "jobs_retries_total", tenant="globex", kind="flaky") == 0
    assert _value(metrics, "jobs_claimed_total", tenant="acme", kind="flaky") == 0


def test_a_worker_creates_the_latency_series_of_its_kinds_before_any_claim() -> None:
    metrics = WorkerMetrics(tenant_limit=5)
    metrics.know_kinds(KINDS)

    for kind in KINDS:
        assert _value(metrics, "jobs_execution_seconds_count", kind=kind) == 0
        assert _value(metrics, "jobs_queue_wait_seconds_count", kind=kind) == 0
    assert _value(metrics, "jobs_claimed_total", tenant="acme", kind="echo") is None, "no tenant is known yet"


def test_a_tenant_s_first_claim_creates_every_outcome_and_category_of_every_kind_at_zero() -> None:
    metrics = WorkerMetrics(tenant_limit=5)
    metrics.know_kinds(KINDS)

    metrics.count_claims([_claimed("acme", "echo", attempt=1)])

    assert _value(metrics, "jobs_claimed_total", tenant="acme", kind="echo") == 1
    assert _value(metrics, "jobs_claimed_total", tenant="acme", kind="flaky") == 0
    for kind in KINDS:
        assert _value(metrics, "jobs_retries_total", tenant="acme", kind=kind) == 0
        for outcome in AttemptOutcome:
            assert _value(metrics, "jobs_completed_total", tenant="acme", kind=kind, outcome=outcome) == 0
        for category in FAILURE_CATEGORIES:
            assert _value(metrics, "jobs_attempt_failures_total", tenant="acme", kind=kind, category=category) == 0
    assert set(FAILURE_CATEGORIES) == {"retryable", "permanent", "outcome_unknown"}


def test_a_kind_known_later_gets_the_series_of_the_tenants_already_known() -> None:
    metrics = WorkerMetrics(tenant_limit=1)
    metrics.know_kinds(["echo"])
    metrics.count_claims([_claimed("acme", "echo", attempt=1)])
    metrics.count_claims([_claimed("globex", "echo", attempt=2)])  # past the limit: counted as "other"

    metrics.know_kinds(["flaky"])

    for tenant in ("acme", OTHER_TENANT_LABEL):
        assert _value(metrics, "jobs_completed_total", tenant=tenant, kind="flaky", outcome="failed") == 0
    assert _value(metrics, "jobs_retries_total", tenant=OTHER_TENANT_LABEL, kind="echo") == 1
    assert _value(metrics, "jobs_claimed_total", tenant="globex", kind="echo") is None


def test_the_api_creates_every_method_with_every_status_code_at_zero() -> None:
    metrics = ApiMetrics()

    services = {service for service, _ in COUNTED_METHODS}
    assert services == {"jobs.v1.JobService", "jobs.v1.WorkerService", "jobs.v1.AdminService"}
    for service, method in COUNTED_METHODS:
        labels = {"grpc_service": service, "grpc_method": method}
        assert _value(metrics, "grpc_server_handling_seconds_count", **labels) == 0
        for code in grpc.StatusCode:
            assert _value(metrics, "grpc_server_handled_total", **labels, grpc_code=code.name) == 0


def test_arrival_series_exist_for_the_file_s_tenants_and_the_published_kinds() -> None:
    metrics = SubmissionMetrics(tenant_limit=2)

    metrics.know(["acme", "globex", "initech", "acme"], KINDS)

    for tenant in ("acme", "globex", OTHER_TENANT_LABEL):
        for kind in KINDS:
            assert _value(metrics, "jobs_submitted_total", tenant=tenant, kind=kind) == 0
    assert _value(metrics, "jobs_submitted_total", tenant="initech", kind="echo") is None


def test_the_principals_file_names_its_tenants_once_each_in_order(tmp_path) -> None:
    path = tmp_path / "tokens.toml"
    entries = [("a" * 64, 'tenant = "globex"'), ("b" * 64, 'role = "worker"'), ("c" * 64, 'tenant = "acme"')]
    entries.append(("d" * 64, 'tenant = "globex"'))
    path.write_text("\n".join(f'[[principal]]\ntoken_sha256 = "{digest}"\n{line}\n' for digest, line in entries))

    assert PrincipalDirectory.load(path).tenants() == ["globex", "acme"]


async def test_the_api_keeps_creating_arrival_series_as_kinds_are_published() -> None:
    metrics = SubmissionMetrics(tenant_limit=5)
    published = ["echo"]

    async def kinds() -> list[str]:
        return list(published)

    keeping = asyncio.create_task(keep_arrival_series(metrics, lambda: ["acme"], kinds, interval_seconds=0.05))
    try:
        await wait_until(
            lambda: _value(metrics, "jobs_submitted_total", tenant="acme", kind="echo") == 0,
            within_seconds=5,
            what="the echo series",
        )
        published.append("flaky")
        await wait_until(
            lambda: _value(metrics, "jobs_submitted_total", tenant="acme", kind="flaky") == 0,
            within_seconds=5,
            what="the series of a kind published later",
        )
    finally:
        keeping.cancel()
