"""GetJobResult and GetLatestResult through the result cache, over a real database: one database read for
many concurrent callers, tenant walls, and never an older version's result presented as the latest."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from api_service.result_cache import ResultCache, ResultCacheLimits
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import FailedPrecondition, JobSuperseded, NotFound
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Completion, JobResult, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import job_store
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(60)

TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT
OTHER_TENANT = TenantId("tenant-b")
WORKER_ID = "worker-1"
CONCURRENT_READS = 50
RACING_VERSIONS = 12
RACING_READERS = 8


class _IgnoredRejections:
    def rejected(self, outcome: ReportOutcome) -> None:
        pass


class CallCounter:
    """Counts the calls of one job_store read: the database reads behind the cache."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, *, before: Callable | None = None) -> None:
        self.calls = 0
        original = getattr(job_store, name)

        async def counted(*args, **kwargs):
            self.calls += 1
            if before is not None:
                await before(*args, **kwargs)
            return await original(*args, **kwargs)

        monkeypatch.setattr(job_store, name, counted)


@pytest.fixture
def queries(db: Database) -> JobQueries:
    return JobQueries(db, ResultCache(ResultCacheLimits()))


@pytest.fixture
async def submissions(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, _IgnoredRejections(), lease_max_seconds=3600)


async def submit(submissions: SubmissionService, payload: bytes, **fields) -> JobId:
    outcome = await submissions.submit(TENANT, ACTOR, factories.new_job(payload=payload, **fields))
    return outcome.job.job_id


async def run_to_success(db: Database, reports: WorkerReports, job_id: JobId, result: bytes) -> None:
    claimed = await factories.claim_one(db)
    assert claimed.job_id == job_id
    await reports.complete(WORKER_ID, Completion(job_id, claimed.fencing_token, result))


async def test_fifty_concurrent_result_reads_of_one_job_make_one_database_read(
    db, queries, submissions, reports, monkeypatch
):
    job_id = await submit(submissions, b"text")
    await run_to_success(db, reports, job_id, b"summary")
    reads = CallCounter(monkeypatch, "get_result_and_resource")

    answers = await asyncio.gather(*(queries.get_result(TENANT, job_id) for _ in range(CONCURRENT_READS)))

    assert reads.calls == 1
    assert {(a.job_id, a.payload, a.attempt) for a in answers} == {(job_id, b"summary", 1)}
    await queries.get_result(TENANT, job_id)
    assert reads.calls == 1


async def test_another_tenant_is_never_served_the_kept_result(db, queries, submissions, reports, monkeypatch):
    job_id = await submit(submissions, b"text")
    await run_to_success(db, reports, job_id, b"secret")
    reads = CallCounter(monkeypatch, "get_result_and_resource")
    await queries.get_result(TENANT, job_id)

    answers: list[object] = await asyncio.gather(
        queries.get_result(TENANT, job_id), queries.get_result(OTHER_TENANT, job_id), return_exceptions=True
    )
    mine, theirs = answers

    assert isinstance(mine, JobResult) and mine.payload == b"secret"
    assert isinstance(theirs, NotFound) and str(theirs) == "job not found"
    assert reads.calls == 2  # the other tenant's lookup went to the database, under its own key
    with pytest.raises(NotFound):
        await queries.get_result(OTHER_TENANT, job_id)


async def test_a_result_not_ready_yet_is_not_kept(db, queries, submissions, reports):
    job_id = await submit(submissions, b"text")
    with pytest.raises(FailedPrecondition) as not_ready:
        await queries.get_result(TENANT, job_id)
    assert not_ready.value.reason == "RESULT_NOT_READY"

    await run_to_success(db, reports, job_id, b"done")

    assert (await queries.get_result(TENANT, job_id)).payload == b"done"


async def test_a_slow_read_of_the_old_version_fills_only_its_own_entry_and_is_never_the_latest(
    db, queries, submissions, reports, monkeypatch
):
    v1 = await submit(submissions, b"v1", resource_key="doc", resource_version=1)
    await run_to_success(db, reports, v1, b"summary of v1")
    inside_old_read, release_old_read = asyncio.Event(), asyncio.Event()

    async def hold_version_one(conn, tenant, resource_key, version):
        if version == 1:
            inside_old_read.set()
            await release_old_read.wait()

    CallCounter(monkeypatch, "result_for_version", before=hold_version_one)
    slow = asyncio.ensure_future(queries.latest_result(TENANT, "doc"))
    await inside_old_read.wait()  # it read head 1 and is loading version 1's entry

    v2 = await submit(submissions, b"v2", resource_key="doc", resource_version=2)
    with pytest.raises(FailedPrecondition) as not_ready:
        await queries.latest_result(TENANT, "doc")
    release_old_read.set()
    old_job, old_result = await slow

    assert not_ready.value.metadata["resource_version"] == "2"
    assert (old_job.resource_version, old_result.payload) == (1, b"summary of v1")  # it began before v2
    with pytest.raises(FailedPrecondition) as still_not_ready:
        await queries.latest_result(TENANT, "doc")
    assert still_not_ready.value.metadata == {"resource_version": "2", "state": "pending", "job_id": v2}
    await run_to_success(db, reports, v2, b"summary of v2")
    job, result = await queries.latest_result(TENANT, "doc")
    assert (job.job_id, job.resource_version, result.payload) == (v2, 2, b"summary of v2")


async def test_an_old_version_finishing_after_a_new_one_was_submitted_never_becomes_the_latest(
    db, queries, submissions, reports
):
    v1 = await submit(submissions, b"v1", resource_key="doc", resource_version=1)
    claimed_v1 = await factories.claim_one(db)
    v2 = await submit(submissions, b"v2", resource_key="doc", resource_version=2)

    with pytest.raises(JobSuperseded):
        await reports.complete(WORKER_ID, Completion(v1, claimed_v1.fencing_token, b"late v1"))
    with pytest.raises(FailedPrecondition) as not_ready:
        await queries.latest_result(TENANT, "doc")
    await run_to_success(db, reports, v2, b"v2 result")

    assert not_ready.value.metadata["resource_version"] == "2"
    job, result = await queries.latest_result(TENANT, "doc")
    assert (job.job_id, result.payload) == (v2, b"v2 result")
    with pytest.raises(NotFound):
        await queries.latest_result(OTHER_TENANT, "doc")


async def test_readers_racing_new_versions_never_get_a_version_older_than_the_head_when_they_began(
    db, queries, submissions, reports
):
    submitted = 0  # the highest version whose submission has committed
    writer_done = asyncio.Event()
    answers: list[tuple[int, int]] = []

    async def writer() -> None:
        nonlocal submitted
        for version in range(1, RACING_VERSIONS + 1):
            job_id = await submit(submissions, b"v%d" % version, resource_key="doc", resource_version=version)
            submitted = version
            await run_to_success(db, reports, job_id, b"result %d" % version)
        writer_done.set()

    async def reader() -> None:
        while not writer_done.is_set():
            head_before = submitted
            try:
                job, result = await queries.latest_result(TENANT, "doc")
            except NotFound:
                assert head_before == 0
                continue
            except FailedPrecondition as not_ready:
                answers.append((head_before, int(not_ready.metadata["resource_version"])))
                continue
            assert result.payload == b"result %d" % job.resource_version
            answers.append((head_before, job.resource_version))

    await asyncio.gather(writer(), *(reader() for _ in range(RACING_READERS)))

    assert answers, "the readers never overlapped the writer"
    older = [(before, seen) for before, seen in answers if seen < before]
    assert not older, f"answers for a version older than the head when the read began: {older[:5]}"
    job, result = await queries.latest_result(TENANT, "doc")
    assert (job.resource_version, result.payload) == (RACING_VERSIONS, b"result %d" % RACING_VERSIONS)
