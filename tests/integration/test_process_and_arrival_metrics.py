"""Every process exports process_* and jobs_build_info; jobs_submitted_total counts arrivals, once each."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from api_service.metrics import ApiMetrics, SubmissionMetrics
from api_service.usecases.submission import SubmissionService
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits
from shared.metric_labels import OTHER_TENANT_LABEL
from shared.process_metrics import installed_version
from shared.storage.database import Database
from tests import factories
from worker_service.metrics import WorkerMetrics

pytestmark = pytest.mark.timeout(30)

TENANT = TenantId("tenant-a")
ACTOR = "tenant:tenant-a"
PROCESS_SAMPLES = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
    "python_gc_collections_total",
)


@pytest.mark.parametrize(
    ("component", "registry"),
    [("api", lambda: ApiMetrics().registry), ("worker", lambda: WorkerMetrics(tenant_limit=5).registry)],
)
def test_every_process_exports_process_and_build_info_metrics(component, registry) -> None:
    registry = registry()

    samples = {sample.name for family in registry.collect() for sample in family.samples}
    missing = [name for name in PROCESS_SAMPLES if name not in samples]
    assert not missing, f"{component} does not export {missing}"
    assert registry.get_sample_value("process_resident_memory_bytes") > 0
    info = {s.labels["implementation"] for f in registry.collect() if f.name == "python_info" for s in f.samples}
    assert info == {"CPython"}
    labels = {"version": installed_version(), "component": component}
    assert registry.get_sample_value("jobs_build_info", labels) == 1
    assert installed_version() not in ("", "unknown")  # the tests run against the installed package


def _submitted(metrics: SubmissionMetrics, tenant: str, kind: str) -> float:
    return metrics.registry.get_sample_value("jobs_submitted_total", {"tenant": tenant, "kind": kind}) or 0.0


@pytest.fixture
def metrics() -> SubmissionMetrics:
    return SubmissionMetrics(CollectorRegistry(), tenant_limit=2)


@pytest.fixture
async def service(db: Database, metrics: SubmissionMetrics) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits(), metrics=metrics)


async def test_an_arrival_counts_once_and_a_replay_of_its_key_not_again(service, metrics) -> None:
    request = factories.new_job(kind="echo", idempotency_key="order-7")

    first = await service.submit(TENANT, ACTOR, request)
    replay = await service.submit(TENANT, ACTOR, replace(request))

    assert (first.created, replay.created) == (True, False)
    assert _submitted(metrics, TENANT, "echo") == 1


async def test_a_submission_attached_to_an_identical_job_is_no_arrival(service, metrics) -> None:
    request = factories.new_job(kind="echo", payload=b"same input", dedupe_by_input=True)

    first = await service.submit(TENANT, ACTOR, request)
    attached = await service.submit(TENANT, ACTOR, replace(request))

    assert attached.job.job_id == first.job.job_id and not attached.created
    assert _submitted(metrics, TENANT, "echo") == 1


async def test_a_batch_counts_each_new_job_by_kind(service, metrics) -> None:
    await service.submit(TENANT, ACTOR, factories.new_job(kind="echo", idempotency_key="k"))
    jobs = [
        factories.new_job(kind="echo"),
        factories.new_job(kind="flaky"),
        factories.new_job(kind="echo", idempotency_key="k"),  # a replay inside the batch
    ]

    outcomes = await service.submit_many(TENANT, ACTOR, jobs)

    assert [o.created for o in outcomes] == [True, True, False]
    assert (_submitted(metrics, TENANT, "echo"), _submitted(metrics, TENANT, "flaky")) == (2, 1)


async def test_tenants_past_the_label_limit_count_as_other(service, metrics) -> None:
    for tenant in ("t1", "t2", "t3", "t4"):
        await service.submit(TenantId(tenant), f"tenant:{tenant}", factories.new_job(kind="echo"))

    assert [_submitted(metrics, t, "echo") for t in ("t1", "t2", "t3", "t4")] == [1, 1, 0, 0]
    assert _submitted(metrics, OTHER_TENANT_LABEL, "echo") == 2
