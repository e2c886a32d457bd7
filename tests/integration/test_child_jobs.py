"""Child jobs over a real PostgreSQL: created only with the parent's accepted completion, in its
transaction and tenant; never by a stale parent, once however often the completion is repeated; a
fan-in spawned beside them runs after them all and reads their results."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from api_service.usecases.child_jobs import ChildJobs
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from jobs.v1 import jobs_pb2
from shared.domain.children import CHILDREN_PER_PARENT_MAX
from shared.domain.ids import FencingToken, JobId, TenantId, new_job_ids
from shared.domain.jobs import (
    ChildJob,
    ClaimedJob,
    Completion,
    ErrorCategory,
    Job,
    JobState,
    LeaseRef,
    ListFilter,
    ReportOutcome,
)
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import job_store
from shared.storage.database import Database
from tests import factories
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = pytest.mark.timeout(60)

WORKER = "worker-1"
TENANT = factories.TENANT_DEFAULT
OTHER_TENANT = TenantId("tenant-b")


class CountingRejections:
    def __init__(self) -> None:
        self.counts: Counter[ReportOutcome] = Counter()

    def rejected(self, outcome: ReportOutcome) -> None:
        self.counts[outcome] += 1


class CountingSpawns:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def spawned(self, tenant: str, kinds: Any) -> None:
        for kind in kinds:
            self.counts[(tenant, kind)] += 1


@pytest.fixture
async def submissions(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


@pytest.fixture
def spawns() -> CountingSpawns:
    return CountingSpawns()


@pytest.fixture
def reports(db: Database, submissions: SubmissionService, spawns: CountingSpawns) -> WorkerReports:
    return WorkerReports(db, CountingRejections(), lease_max_seconds=3600, children=ChildJobs(db, submissions, spawns))


def child(kind: str = "echo", payload: bytes = b"child", **fields: Any) -> ChildJob:
    (job_id,) = new_job_ids(1)
    return ChildJob(JobId(str(job_id)), factories.new_job(kind=kind, payload=payload, **fields))


def completion(
    claimed: ClaimedJob, *children: ChildJob, token: int | None = None, result: bytes = b"done"
) -> Completion:
    fencing = FencingToken(claimed.fencing_token if token is None else token)
    return Completion(claimed.job_id, fencing, result, tuple(children))


async def children_of(db: Database, parent: JobId, tenant: TenantId = TENANT) -> list[Job]:
    async with db.transaction() as conn:
        page = await job_store.list_jobs(conn, tenant, ListFilter(parent_job_id=parent), None, 1000)
    return page.jobs


async def job_count(db: Database) -> int:
    async with db.transaction() as conn:
        row = await (await conn.execute("SELECT count(*) AS n FROM jobs")).fetchone()
    assert row is not None
    return int(row["n"])


async def state_of(db: Database, job_id: JobId, tenant: TenantId = TENANT) -> JobState:
    async with db.transaction() as conn:
        job = await job_store.get_job(conn, tenant, job_id)
    assert job is not None
    return job.state


async def test_children_are_created_with_the_accepted_completion_in_the_parents_tenant(
    db: Database, reports: WorkerReports, spawns: CountingSpawns
) -> None:
    parent = await factories.insert_and_claim(db)
    spawned = [child(payload=f"page {i}".encode(), labels={"page": str(i)}) for i in range(3)]

    assert await reports.complete_many(WORKER, [completion(parent, *spawned)]) == [ReportOutcome.ACCEPTED]

    found = await children_of(db, parent.job_id)
    assert sorted(j.job_id for j in found) == sorted(c.job_id for c in spawned)
    assert {j.tenant for j in found} == {TENANT}
    assert {j.parent_job_id for j in found} == {parent.job_id}
    assert {j.state for j in found} == {JobState.PENDING}
    assert await state_of(db, parent.job_id) is JobState.SUCCEEDED
    assert spawns.counts == Counter({(TENANT, "echo"): 3})


async def test_a_stale_parent_creates_no_children_even_racing_the_current_holder(
    db: Database, reports: WorkerReports
) -> None:
    stale = await factories.insert_and_claim(db)
    current = await factories.reclaim(db, stale.job_id)
    stale_children = [child() for _ in range(5)]
    current_children = [child() for _ in range(5)]

    outcomes = await asyncio.gather(
        reports.complete_many(WORKER, [completion(stale, *stale_children)]),
        reports.complete_many("worker-2", [completion(current, *current_children)]),
    )

    assert list(outcomes) == [[ReportOutcome.LEASE_LOST], [ReportOutcome.ACCEPTED]]
    found = {j.job_id for j in await children_of(db, stale.job_id)}
    assert found == {c.job_id for c in current_children}


async def test_a_parent_whose_lease_was_taken_over_completes_late_without_children(
    db: Database, reports: WorkerReports
) -> None:
    first = await factories.insert_and_claim(db)
    await factories.reclaim(db, first.job_id)
    before = await job_count(db)

    assert await reports.complete_many(WORKER, [completion(first, child(), child())]) == [ReportOutcome.LEASE_LOST]

    assert await job_count(db) == before
    assert await state_of(db, first.job_id) is JobState.RUNNING


async def test_a_repeated_completion_creates_the_children_once(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    report = completion(parent, *[child() for _ in range(4)])

    concurrent = await asyncio.gather(*(reports.complete_many(WORKER, [report]) for _ in range(3)))
    again = await reports.complete_many(WORKER, [report])

    assert sorted(outcome for (outcome,) in concurrent) == sorted(
        [ReportOutcome.ACCEPTED, ReportOutcome.LEASE_LOST, ReportOutcome.LEASE_LOST]
    )
    assert again == [ReportOutcome.LEASE_LOST]
    assert len(await children_of(db, parent.job_id)) == 4


async def test_a_cancelled_parent_creates_no_children(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    lifecycle = JobLifecycle(db)
    await lifecycle.cancel(TENANT, factories.ACTOR_DEFAULT, parent.job_id, "stop")

    assert await reports.complete_many(WORKER, [completion(parent, child())]) == [ReportOutcome.JOB_CANCELLED]
    assert await children_of(db, parent.job_id) == []


async def test_a_fan_in_runs_after_every_child_and_reads_their_results(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    pages = [child(payload=f"page {i}".encode()) for i in range(3)]
    merge = child(kind="summarize", payload=b"merge", depends_on=tuple(p.job_id for p in pages))
    assert await reports.complete_many(WORKER, [completion(parent, *pages, merge)]) == [ReportOutcome.ACCEPTED]
    assert await state_of(db, merge.job_id) is JobState.BLOCKED

    for index in range(3):
        running = await factories.claim_one(db, kinds=("echo",))
        assert await state_of(db, merge.job_id) is JobState.BLOCKED
        outcome = await reports.complete_many(WORKER, [completion(running, result=f"result {index}".encode())])
        assert outcome == [ReportOutcome.ACCEPTED]

    assert await state_of(db, merge.job_id) is JobState.PENDING
    fan_in = await factories.claim_one(db, kinds=("summarize",))
    assert fan_in.job_id == merge.job_id
    page = await reports.dependency_results(LeaseRef(fan_in.job_id, fan_in.fencing_token), None)
    assert not isinstance(page, ReportOutcome)
    assert sorted(payload for _, payload in page.results) == [b"result 0", b"result 1", b"result 2"]
    assert {job_id for job_id, _ in page.results} == {p.job_id for p in pages}


async def test_a_refused_child_fails_the_parent_and_creates_nothing(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    before = await job_count(db)

    outcome = await reports.complete_many(WORKER, [completion(parent, child(), child(kind="no-such-kind"))])

    assert outcome == [ReportOutcome.CHILDREN_REFUSED]
    assert await job_count(db) == before
    async with db.transaction() as conn:
        failed = await job_store.get_job(conn, TENANT, parent.job_id)
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.last_error is not None and failed.last_error.category is ErrorCategory.PERMANENT
    assert "children[1].kind" in failed.last_error.message


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"idempotency_key": "k"}, "idempotency_key"),
        ({"resource_key": "doc", "resource_version": 2}, "resource_key"),
        ({"dedupe_by_input": True}, "dedupe_by_input"),
    ],
)
async def test_a_child_cannot_ask_to_be_something_other_than_a_new_job(
    db: Database, reports: WorkerReports, fields: dict[str, Any], named: str
) -> None:
    parent = await factories.insert_and_claim(db)
    assert await reports.complete_many(WORKER, [completion(parent, child(**fields))]) == [
        ReportOutcome.CHILDREN_REFUSED
    ]
    async with db.transaction() as conn:
        failed = await job_store.get_job(conn, TENANT, parent.job_id)
    assert failed is not None and failed.last_error is not None and named in failed.last_error.message


async def test_children_are_bounded_per_parent(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    too_many = [child() for _ in range(CHILDREN_PER_PARENT_MAX + 1)]

    assert await reports.complete_many(WORKER, [completion(parent, *too_many)]) == [ReportOutcome.CHILDREN_REFUSED]
    assert await children_of(db, parent.job_id) == []


async def test_a_child_depends_only_on_jobs_spawned_before_it(db: Database, reports: WorkerReports) -> None:
    parent = await factories.insert_and_claim(db)
    later = child()
    early = child(depends_on=(later.job_id,))

    assert await reports.complete_many(WORKER, [completion(parent, early, later)]) == [ReportOutcome.CHILDREN_REFUSED]
    assert await children_of(db, parent.job_id) == []


async def test_tenant_walls_hold_for_children(db: Database, reports: WorkerReports) -> None:
    foreign = await factories.insert_job(db, tenant=OTHER_TENANT, kind="summarize")
    parent = await factories.insert_and_claim(db)
    before = await job_count(db)

    # A child cannot depend on (or so learn of) another tenant's job: refused as if it did not exist.
    refused = await reports.complete_many(WORKER, [completion(parent, child(depends_on=(foreign.job_id,)))])
    assert refused == [ReportOutcome.CHILDREN_REFUSED]
    assert await job_count(db) == before

    other_parent = await factories.insert_and_claim(db, tenant=OTHER_TENANT)
    spawned = child()
    assert await reports.complete_many(WORKER, [completion(other_parent, spawned)]) == [ReportOutcome.ACCEPTED]
    # The child is its parent's tenant's: the other tenant neither lists nor reads it.
    assert [j.job_id for j in await children_of(db, other_parent.job_id, OTHER_TENANT)] == [spawned.job_id]
    assert await children_of(db, other_parent.job_id, TENANT) == []
    async with db.transaction() as conn:
        assert await job_store.get_job(conn, TENANT, spawned.job_id) is None


async def test_parents_with_and_without_children_complete_in_one_batch(db: Database, reports: WorkerReports) -> None:
    plain = await factories.insert_and_claim(db)
    parent = await factories.insert_and_claim(db)
    stale = await factories.insert_and_claim(db)
    await factories.reclaim(db, stale.job_id)
    spawned = child()

    outcomes = await reports.complete_many(
        WORKER, [completion(plain), completion(parent, spawned), completion(stale, child())]
    )

    assert outcomes == [ReportOutcome.ACCEPTED, ReportOutcome.ACCEPTED, ReportOutcome.LEASE_LOST]
    assert [j.job_id for j in await children_of(db, parent.job_id)] == [spawned.job_id]
    assert await children_of(db, stale.job_id) == []


async def test_racing_replicas_create_only_the_current_holders_children(db: Database, reports: WorkerReports) -> None:
    """Many parents at once, each completed by its stale holder and its current one in different batches
    racing each other: every parent has exactly the current holder's children, and no other job exists."""
    parents = 12
    stale = [await factories.insert_and_claim(db) for _ in range(parents)]
    current = [await factories.reclaim(db, s.job_id) for s in stale]
    stale_reports = [completion(s, child(), child()) for s in stale]
    current_reports = [completion(c, child(), child(), child()) for c in current]
    before = await job_count(db)

    batches = [
        reports.complete_many("stale-replica", stale_reports[: parents // 2]),
        reports.complete_many("current-replica", current_reports[parents // 2 :]),
        reports.complete_many("current-replica-2", current_reports[: parents // 2]),
        reports.complete_many("stale-replica-2", stale_reports[parents // 2 :]),
    ]
    outcomes = [outcome for batch in await asyncio.gather(*batches) for outcome in batch]

    assert Counter(outcomes) == Counter({ReportOutcome.LEASE_LOST: parents, ReportOutcome.ACCEPTED: parents})
    for report in current_reports:
        found = {j.job_id for j in await children_of(db, report.job_id)}
        assert found == {c.job_id for c in report.children}
    assert await job_count(db) == before + 3 * parents


def test_a_worker_whose_child_the_api_refuses_fails_its_job_once_naming_the_child(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme = service_stack.tenant("acme")
    parent = acme.submit("spawn.unknown").job.job_id

    wait_until(lambda: acme.get(parent).state == jobs_pb2.JOB_STATE_FAILED, timeout=60, what="the parent to fail")
    failed = acme.get(parent)
    assert failed.attempts == 1, "a refused spawn fails the same way every time: no retry"
    assert "children[1].kind" in failed.last_error.message
    listed = acme.stub.ListJobs(jobs_pb2.ListJobsRequest(parent_job_id=parent), metadata=acme.metadata, timeout=10)
    assert list(listed.jobs) == []
