"""Delivery sets and dependency results over a real database: a set is complete only when every member of
its version succeeded, a newer version supersedes it whole, the latest read never mixes versions, the fan-in
runs once all members succeeded and reads their results under its own lease only, and a failed member
fails the set or waits for a retry as its policy says."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from api_service.usecases.delivery_sets import DeliverySets
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.resources import ResourceDeletions
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.delivery_sets import DeliverySet, FailurePolicy, NewDeliverySet, SetState
from shared.domain.errors import AlreadyExists, FailedPrecondition, NotFound
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import Completion, ErrorCategory, JobError, JobState, LeaseRef, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import dependency_results
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.database_roles import ServiceLogins
from tests.db_fixtures import SyncProbe

pytestmark = pytest.mark.timeout(60)

TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT
OTHER_TENANT = TenantId("tenant-b")
WORKER_ID = "worker-1"
KEY = "lesson-12"
MEMBERS = ("text", "image", "audio")


class _Rejections:
    def rejected(self, outcome: ReportOutcome) -> None:
        pass


@pytest.fixture
async def submissions(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


@pytest.fixture
def sets(db: Database, submissions: SubmissionService) -> DeliverySets:
    return DeliverySets(db, submissions)


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, _Rejections(), lease_max_seconds=3600)


def _new_set(version: int, *, fan_in: bool = True, policy: FailurePolicy = FailurePolicy.FAIL_SET) -> NewDeliverySet:
    return NewDeliverySet(
        resource_key=KEY,
        resource_version=version,
        members=tuple((name, factories.new_job(payload=f"{name} v{version}".encode())) for name in MEMBERS),
        fan_in=factories.new_job(kind="sleep", payload=b'{"seconds": 0}') if fan_in else None,
        failure_policy=policy,
    )


def _member(found: DeliverySet, name: str) -> JobId:
    return next(m.job.job_id for m in found.members if m.name == name)


async def _claim(db: Database, reports: WorkerReports, job_ids: list[JobId]) -> dict[JobId, FencingToken]:
    """Claims exactly the named echo jobs: the claim picks its own order, so the others it took are handed
    back unstarted (their attempt not counted)."""
    claimed = await factories.claim(db, limit=100)
    for other in (c for c in claimed if c.job_id not in job_ids):
        await reports.release(WORKER_ID, LeaseRef(other.job_id, other.fencing_token), started=False, reason="test")
    tokens = {c.job_id: c.fencing_token for c in claimed if c.job_id in job_ids}
    assert sorted(tokens) == sorted(job_ids)
    return tokens


async def _run(db: Database, reports: WorkerReports, *job_ids: JobId) -> None:
    """Claims the named jobs and completes each with its own payload."""
    tokens = await _claim(db, reports, list(job_ids))
    async with db.transaction() as conn:
        cur = await conn.execute("SELECT job_id, payload FROM jobs WHERE job_id = ANY(%s::uuid[])", (list(job_ids),))
        payloads = {str(r["job_id"]): bytes(r["payload"]) for r in await cur.fetchall()}
    for job_id, token in tokens.items():
        await reports.complete(WORKER_ID, Completion(job_id, token, payloads[job_id]))


async def test_a_set_is_complete_only_when_every_member_succeeded_and_then_its_fan_in_runs(
    db: Database, sets: DeliverySets, reports: WorkerReports
):
    stored, created = await sets.submit(TENANT, ACTOR, _new_set(7))
    assert created and stored.state is SetState.IN_PROGRESS
    assert stored.fan_in is not None and stored.fan_in.state is JobState.BLOCKED

    await _run(db, reports, _member(stored, "text"), _member(stored, "image"))
    partial = await sets.get(TENANT, KEY, 7)
    assert partial.state is SetState.IN_PROGRESS
    assert all(m.result is None for m in partial.members), "a partial set shows no results"
    with pytest.raises(FailedPrecondition) as not_ready:
        await sets.latest_complete(TENANT, KEY)
    assert not_ready.value.reason == "RESULT_NOT_READY"

    await _run(db, reports, _member(stored, "audio"))
    latest = await sets.latest_complete(TENANT, KEY)
    assert latest.state is SetState.COMPLETE and latest.resource_version == 7
    assert {m.name: m.result.payload for m in latest.members if m.result} == {
        name: f"{name} v7".encode() for name in MEMBERS
    }
    assert latest.fan_in is not None and latest.fan_in.state is JobState.PENDING


async def test_a_newer_version_supersedes_the_whole_set_and_the_latest_read_never_mixes_versions(
    db: Database, sets: DeliverySets, reports: WorkerReports, sync_db: SyncProbe
):
    seven, _ = await sets.submit(TENANT, ACTOR, _new_set(7))
    await _run(db, reports, _member(seven, "text"))  # one member of version 7 succeeded

    eight, _ = await sets.submit(TENANT, ACTOR, _new_set(8))

    old = await sets.get(TENANT, KEY, 7)
    assert old.state is SetState.SUPERSEDED
    assert {m.name: m.job.state for m in old.members} == {
        "text": JobState.SUCCEEDED,
        "image": JobState.SUPERSEDED,
        "audio": JobState.SUPERSEDED,
    }
    assert old.fan_in is not None and old.fan_in.state is JobState.SUPERSEDED
    with pytest.raises(FailedPrecondition):
        await sets.latest_complete(TENANT, KEY)  # version 8 is not complete; version 7 is never answered
    await _run(db, reports, *(_member(eight, name) for name in MEMBERS))
    latest = await sets.latest_complete(TENANT, KEY)
    assert latest.resource_version == 8
    assert {m.result.payload for m in latest.members if m.result} == {f"{n} v8".encode() for n in MEMBERS}


async def test_the_same_set_again_is_answered_and_other_members_for_its_version_are_refused(
    sets: DeliverySets, sync_db: SyncProbe
):
    first, _ = await sets.submit(TENANT, ACTOR, _new_set(3, fan_in=False))
    again, created = await sets.submit(TENANT, ACTOR, _new_set(3, fan_in=False))
    assert (again.set_id, created) == (first.set_id, False)
    other = NewDeliverySet(KEY, 3, (("video", factories.new_job()),), None, FailurePolicy.FAIL_SET)
    with pytest.raises(AlreadyExists):
        await sets.submit(TENANT, ACTOR, other)
    assert sync_db.one("SELECT count(*) AS n FROM jobs")["n"] == len(MEMBERS)


async def test_a_failed_member_fails_a_fail_set_set_and_its_fan_in(
    db: Database, sets: DeliverySets, reports: WorkerReports
):
    stored, _ = await sets.submit(TENANT, ACTOR, _new_set(1, policy=FailurePolicy.FAIL_SET))
    claimed = await factories.claim_one(db)
    await reports.fail(
        WORKER_ID, LeaseRef(claimed.job_id, claimed.fencing_token), JobError(ErrorCategory.PERMANENT, "no")
    )

    found = await sets.get(TENANT, KEY, 1)
    assert found.state is SetState.FAILED
    assert found.fan_in is not None and found.fan_in.state is JobState.FAILED


async def test_a_failed_member_of_a_waiting_set_keeps_the_fan_in_blocked_until_its_retry_succeeds(
    db: Database, sets: DeliverySets, reports: WorkerReports
):
    stored, _ = await sets.submit(TENANT, ACTOR, _new_set(1, policy=FailurePolicy.WAIT_FOR_MANUAL_RETRY))
    failing = _member(stored, "image")
    tokens = await _claim(db, reports, [m.job.job_id for m in stored.members])
    for member in ("text", "audio"):
        job_id = _member(stored, member)
        await reports.complete(WORKER_ID, Completion(job_id, tokens[job_id], b"done"))
    await reports.fail(WORKER_ID, LeaseRef(failing, tokens[failing]), JobError(ErrorCategory.PERMANENT, "no"))

    waiting = await sets.get(TENANT, KEY, 1)
    assert waiting.state is SetState.WAITING_FOR_RETRY
    assert waiting.fan_in is not None and waiting.fan_in.state is JobState.BLOCKED

    await JobLifecycle(db).retry(TENANT, ACTOR, failing, "fixed the image", accept_duplicate_risk=False)
    await _run(db, reports, failing)
    done = await sets.get(TENANT, KEY, 1)
    assert done.state is SetState.COMPLETE
    assert done.fan_in is not None and done.fan_in.state is JobState.PENDING


async def test_a_fan_in_reads_its_members_results_under_its_own_lease_only(
    db: Database, sets: DeliverySets, reports: WorkerReports, sync_db: SyncProbe
):
    stored, _ = await sets.submit(TENANT, ACTOR, _new_set(2))
    await _run(db, reports, *(_member(stored, name) for name in MEMBERS))
    fan_in = await factories.claim_one(db, kinds=("sleep",))
    lease = LeaseRef(fan_in.job_id, fan_in.fencing_token)

    page = await reports.dependency_results(lease, None)
    assert not isinstance(page, ReportOutcome)
    assert dict(page.results) == {_member(stored, n): f"{n} v2".encode() for n in MEMBERS}
    assert page.next_after is None

    await factories.expire_lease(db, fan_in.job_id)
    await factories.rescue_expired(db)
    sync_db.execute("UPDATE jobs SET run_after = now() WHERE job_id = %s", (fan_in.job_id,))
    stale = await factories.claim_one(db, kinds=("sleep",))
    assert await reports.dependency_results(lease, None) is ReportOutcome.LEASE_LOST
    current = await reports.dependency_results(LeaseRef(stale.job_id, stale.fencing_token), None)
    assert not isinstance(current, ReportOutcome) and len(current.results) == 3


async def test_dependency_results_come_in_pages_bounded_in_bytes(
    db: Database, sets: DeliverySets, reports: WorkerReports
):
    stored, _ = await sets.submit(TENANT, ACTOR, _new_set(2))
    await _run(db, reports, *(_member(stored, name) for name in MEMBERS))
    fan_in = await factories.claim_one(db, kinds=("sleep",))
    seen: dict[JobId, bytes] = {}
    after = None
    pages = 0
    while True:
        async with db.transaction() as conn:
            page = await dependency_results.read_page(
                conn, job_id=fan_in.job_id, fencing_token=fan_in.fencing_token, after=after, max_bytes=9
            )
        assert page is not None and len(page.results) == 1, "each result is 8 or 9 bytes: one per page"
        seen.update(page.results)
        pages += 1
        if page.next_after is None:
            break
        after = page.next_after
    assert pages == 3 and len(seen) == 3


async def test_dependency_results_never_cross_tenants(db: Database, reports: WorkerReports, sync_db: SyncProbe):
    other = await factories.insert_job(db, tenant=OTHER_TENANT)
    sync_db.execute("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE job_id = %s", (other.job_id,))
    sync_db.execute(
        "INSERT INTO job_results (job_id, tenant, payload, attempt, fencing_token) VALUES (%s, 'tenant-b', 'x', 1, 1)",
        (other.job_id,),
    )
    claimed = await factories.insert_and_claim(db, kind="echo")
    sync_db.execute("UPDATE jobs SET depends_on = ARRAY[%s]::uuid[] WHERE job_id = %s", (other.job_id, claimed.job_id))

    page = await reports.dependency_results(LeaseRef(claimed.job_id, claimed.fencing_token), None)

    assert not isinstance(page, ReportOutcome) and page.results == []


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    """The API's own role: row-level security and grants apply as in production."""
    database = await Database.open(PoolSettings(ServiceLogins.url(database_url, service_logins.api), min_size=1))
    try:
        yield database
    finally:
        await database.close()


async def test_sets_and_deletions_work_as_the_api_role_and_stay_within_the_tenant(api_db: Database, db: Database):
    as_api = DeliverySets(api_db, SubmissionService(api_db, await factories.published_kinds(db), SubmissionLimits()))
    api_reports = WorkerReports(api_db, _Rejections(), lease_max_seconds=3600)
    stored, _ = await as_api.submit(TENANT, ACTOR, _new_set(1))
    await _run(db, api_reports, *(m.job.job_id for m in stored.members))
    assert (await as_api.latest_complete(TENANT, KEY)).state is SetState.COMPLETE
    with pytest.raises(NotFound):
        await as_api.get(OTHER_TENANT, KEY, 1)

    with pytest.raises(NotFound):
        await ResourceDeletions(api_db).delete(OTHER_TENANT, "tenant:tenant-b", KEY, "not theirs")
    deletion = await ResourceDeletions(api_db).delete(TENANT, ACTOR, KEY, "withdrawn")

    assert deletion.deleted_results == len(MEMBERS)
    assert (await as_api.get(TENANT, KEY, 1)).state is SetState.DELETED


async def test_a_set_missing_a_member_removed_by_retention_is_never_complete(
    db: Database, sets: DeliverySets, reports: WorkerReports, sync_db: SyncProbe
):
    stored, _ = await sets.submit(TENANT, ACTOR, _new_set(1, fan_in=False))
    await _run(db, reports, *(m.job.job_id for m in stored.members))
    sync_db.execute("DELETE FROM jobs WHERE job_id = %s", (_member(stored, "audio"),))  # as retention would

    found = await sets.get(TENANT, KEY, 1)

    assert found.state is SetState.EXPIRED and len(found.members) == 2
    assert all(m.result is None for m in found.members)
