"""DeleteResource over a real database: a tombstone ends the key's work, hides its results at once (cached ones
included), refuses the deleted versions' completions, submissions and retries, and wins every race with a
completion: a job running when the deletion happened never publishes after it."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg.rows import dict_row

from api_service.result_cache import ResultCache, ResultCacheLimits
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.resources import ResourceDeletions
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import InvalidArgument, NotFound, ResourceDeleted
from shared.domain.ids import JobId
from shared.domain.jobs import Completion, JobState, LeaseRef, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store, resource_store
from shared.storage.database import Database
from tests import factories
from tests.conditions import wait_until
from tests.db_fixtures import SyncProbe

pytestmark = pytest.mark.timeout(60)

TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT
WORKER_ID = "worker-1"
KEY = "doc-7"
RACE_APPLICATION_NAME = "tombstone-race"


class _Rejections:
    def __init__(self) -> None:
        self.seen: list[ReportOutcome] = []

    def rejected(self, outcome: ReportOutcome) -> None:
        self.seen.append(outcome)


@pytest.fixture
async def submissions(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, _Rejections(), lease_max_seconds=3600)


async def _submit(submissions: SubmissionService, version: int, payload: bytes = b"text") -> JobId:
    outcome = await submissions.submit(
        TENANT, ACTOR, factories.new_job(payload=payload, resource_key=KEY, resource_version=version)
    )
    return outcome.job.job_id


def _locks_waited_on(sync_db: SyncProbe) -> bool:
    return bool(sync_db.rows("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"))


async def test_a_deletion_ends_waiting_and_running_work_and_hides_cached_results_at_once(
    db: Database, submissions: SubmissionService, reports: WorkerReports, sync_db: SyncProbe
):
    queries = JobQueries(db, ResultCache(ResultCacheLimits()))
    done = await _submit(submissions, 1)
    claimed = await factories.claim_one(db)
    await reports.complete(WORKER_ID, Completion(done, claimed.fencing_token, b"v1 summary"))
    running = await _submit(submissions, 2)
    running_lease = await factories.claim_one(db)
    waiting = await _submit(submissions, 2)
    assert (await queries.get_result(TENANT, done)).payload == b"v1 summary"  # now kept in the cache

    deletion = await ResourceDeletions(db).delete(TENANT, ACTOR, KEY, "the document was deleted")

    assert deletion.deleted_version == 2
    assert sorted(deletion.cancelled) == sorted([running, waiting])
    assert deletion.deleted_results == 1
    with pytest.raises(NotFound):
        await queries.get_result(TENANT, done)  # the cached entry is not served
    with pytest.raises(NotFound):
        await queries.latest_result(TENANT, KEY)
    assert sync_db.job(waiting)["state"] == "cancelled"
    assert sync_db.job(running)["state"] == "cancelled"
    (status,) = await reports.heartbeat([LeaseRef(running, running_lease.fencing_token)], 30)
    assert (status.held, status.cancel_requested, status.resource_deleted) == (False, True, True)
    outcomes = await reports.complete_many(WORKER_ID, [Completion(running, running_lease.fencing_token, b"late")])
    assert outcomes == [ReportOutcome.RESOURCE_DELETED]
    assert sync_db.rows("SELECT * FROM job_results") == []
    record = sync_db.one("SELECT * FROM resource_deletions")
    assert (record["actor"], record["reason"], record["deleted_version"]) == (ACTOR, "the document was deleted", 2)
    event = sync_db.one("SELECT actor, reason FROM job_events WHERE job_id = %s AND to_state = 'cancelled'", (running,))
    assert event == {"actor": ACTOR, "reason": "resource deleted: the document was deleted"}


async def test_deleted_versions_are_refused_and_a_higher_version_brings_the_key_back(
    db: Database, submissions: SubmissionService, reports: WorkerReports
):
    queries = JobQueries(db, ResultCache(ResultCacheLimits()))
    old = await _submit(submissions, 3)
    await ResourceDeletions(db).delete(TENANT, ACTOR, KEY, "withdrawn")

    for version in (1, 3):
        with pytest.raises(ResourceDeleted):
            await _submit(submissions, version)
    with pytest.raises(ResourceDeleted):
        await JobLifecycle(db).retry(TENANT, ACTOR, old, "bring it back", accept_duplicate_risk=False)

    revived = await _submit(submissions, 4, b"new text")
    claimed = await factories.claim_one(db)
    assert claimed.job_id == revived
    await reports.complete(WORKER_ID, Completion(revived, claimed.fencing_token, b"v4 summary"))
    job, result = await queries.latest_result(TENANT, KEY)
    assert (job.resource_version, result.payload) == (4, b"v4 summary")


async def test_deleting_a_key_the_tenant_never_submitted_is_not_found_and_a_reason_is_required(db: Database):
    with pytest.raises(NotFound):
        await ResourceDeletions(db).delete(TENANT, ACTOR, "no-such-key", "why")
    with pytest.raises(InvalidArgument):
        await ResourceDeletions(db).delete(TENANT, ACTOR, KEY, "")


async def test_a_completion_waiting_on_a_deletion_is_refused_once_the_deletion_commits(
    db: Database, database_url: str, submissions: SubmissionService, reports: WorkerReports, sync_db: SyncProbe
):
    job_id = await _submit(submissions, 1)
    claimed = await factories.claim_one(db)

    async with await psycopg.AsyncConnection.connect(
        database_url, row_factory=dict_row, application_name=RACE_APPLICATION_NAME
    ) as deleting:
        deletion = await resource_store.delete_resource(
            deleting, tenant=TENANT, resource_key=KEY, actor=ACTOR, reason="race"
        )  # holds the job row, not committed
        assert deletion is not None and deletion.cancelled == [job_id]
        completing = asyncio.create_task(
            reports.complete_many(WORKER_ID, [Completion(job_id, claimed.fencing_token, b"result")])
        )
        await wait_until(lambda: _locks_waited_on(sync_db), what="the completion to wait for the deletion's lock")
        await deleting.commit()
        outcomes = await completing

    assert outcomes == [ReportOutcome.RESOURCE_DELETED]
    assert sync_db.rows("SELECT * FROM job_results") == []
    assert sync_db.job(job_id)["state"] == "cancelled"


async def test_a_deletion_waiting_on_a_completion_removes_the_result_it_published(
    db: Database, database_url: str, submissions: SubmissionService, sync_db: SyncProbe
):
    job_id = await _submit(submissions, 1)
    claimed = await factories.claim_one(db)
    queries = JobQueries(db, ResultCache(ResultCacheLimits()))

    async with await psycopg.AsyncConnection.connect(
        database_url, row_factory=dict_row, application_name=RACE_APPLICATION_NAME
    ) as completing:
        outcomes = await lease_store.complete_batch(
            completing, worker_id=WORKER_ID, completions=[Completion(job_id, claimed.fencing_token, b"result")]
        )  # holds the job row, not committed
        assert outcomes == [ReportOutcome.ACCEPTED]
        deleting = asyncio.create_task(ResourceDeletions(db).delete(TENANT, ACTOR, KEY, "race"))
        await wait_until(lambda: _locks_waited_on(sync_db), what="the deletion to wait for the completion's lock")
        await completing.commit()
        deletion = await deleting

    assert deletion.cancelled == [] and deletion.deleted_results == 1
    assert sync_db.rows("SELECT * FROM job_results") == []
    assert sync_db.job(job_id)["state"] == JobState.SUCCEEDED.value
    with pytest.raises(NotFound):
        await queries.get_result(TENANT, job_id)


async def test_the_completion_statement_itself_refuses_a_version_under_a_tombstone(
    db: Database, submissions: SubmissionService, reports: WorkerReports, sync_db: SyncProbe
):
    """A running job whose row the deletion never touched (written by hand here) is still refused: the
    statement that writes the result reads the tombstone itself."""
    job_id = await _submit(submissions, 1)
    claimed = await factories.claim_one(db)
    sync_db.execute("UPDATE resource_heads SET deleted_version = 1 WHERE resource_key = %s", (KEY,))

    outcomes = await reports.complete_many(WORKER_ID, [Completion(job_id, claimed.fencing_token, b"result")])

    assert outcomes == [ReportOutcome.RESOURCE_DELETED]
    assert sync_db.rows("SELECT * FROM job_results") == []
    assert sync_db.job(job_id)["state"] == "running"
