"""RetryJob's refusals: a dependency that is gone, a newer version racing the retry, and the consent to
a duplicate effect, which no detour through another state can skip."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from api_service.usecases.job_queries import JobQueries
from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import FailedPrecondition, NotFound
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import ClaimedJob, Completion, ErrorCategory, JobError, JobState, LeaseRef
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import receipt_store
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.conditions import wait_until
from tests.database_roles import ServiceLogins
from tests.db_fixtures import POOL_APPLICATION_NAME

pytestmark = pytest.mark.timeout(30)

TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT
WORKER_ID = "worker-1"


class _Rejections:
    def rejected(self, outcome: object) -> None:
        pass


@pytest.fixture
def lifecycle(db: Database) -> JobLifecycle:
    return JobLifecycle(db)


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, _Rejections(), lease_max_seconds=3600)


def lease_of(claimed: ClaimedJob) -> LeaseRef:
    return LeaseRef(claimed.job_id, FencingToken(claimed.fencing_token))


async def _refused(call, reason: str) -> FailedPrecondition:
    with pytest.raises(FailedPrecondition) as raised:
        await call
    assert raised.value.reason == reason, raised.value.message
    return raised.value


def _pool_backends_waiting_on_a_lock(sync_db) -> int:
    return sync_db.one(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (POOL_APPLICATION_NAME,),
    )["n"]


# A dependency that no longer exists.


async def _dependent_that_failed(db, service, reports, dependency_ends: JobState) -> tuple[JobId, JobId]:
    """A dependency that ended `dependency_ends` and its dependent, FAILED either way."""
    dependency = await factories.insert_and_claim(db)
    dependent = (await service.submit(TENANT, ACTOR, factories.new_job(depends_on=(dependency.job_id,)))).job
    if dependency_ends is JobState.SUCCEEDED:
        await reports.complete(WORKER_ID, Completion(dependency.job_id, FencingToken(dependency.fencing_token), b"r"))
        claimed = await factories.claim_one(db)
        assert claimed.job_id == dependent.job_id
        await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.PERMANENT, "bad input"))
    else:
        await reports.fail(WORKER_ID, lease_of(dependency), JobError(ErrorCategory.PERMANENT, "bad input"))
    return dependency.job_id, dependent.job_id


@pytest.mark.parametrize("dependency_ends", [JobState.SUCCEEDED, JobState.FAILED])
async def test_a_retry_whose_dependency_no_longer_exists_is_refused_and_never_blocks(
    db, sync_db, service, reports, lifecycle, dependency_ends
):
    dependency, dependent = await _dependent_that_failed(db, service, reports, dependency_ends)
    assert sync_db.job(dependent)["state"] == "failed"
    # Deleted as retention did before it kept dependencies, or as an operator may by hand.
    sync_db.execute("DELETE FROM jobs WHERE job_id = %s", (dependency,))
    before = sync_db.snapshot()

    refusal = await _refused(
        lifecycle.retry(TENANT, ACTOR, dependent, "again", accept_duplicate_risk=False), "DEPENDENCY_MISSING"
    )

    assert refusal.metadata == {"dependency": dependency}
    assert sync_db.snapshot() == before
    assert sync_db.one("SELECT count(*) AS n FROM jobs WHERE state = 'blocked'")["n"] == 0


async def test_a_retry_waits_for_an_unfinished_dependency_and_refuses_a_failed_one(
    db, sync_db, service, reports, lifecycle
):
    running = await factories.insert_and_claim(db)
    dependent = (await service.submit(TENANT, ACTOR, factories.new_job(depends_on=(running.job_id,)))).job
    await lifecycle.cancel(TENANT, ACTOR, dependent.job_id, "not yet")

    reopened = await lifecycle.retry(TENANT, ACTOR, dependent.job_id, "now", accept_duplicate_risk=False)
    assert reopened.state is JobState.BLOCKED
    await reports.fail(WORKER_ID, lease_of(running), JobError(ErrorCategory.PERMANENT, "no"))
    assert sync_db.job(dependent.job_id)["state"] == "failed"

    await _refused(
        lifecycle.retry(TENANT, ACTOR, dependent.job_id, "again", accept_duplicate_risk=False), "DEPENDENCY_FAILED"
    )


# A newer version racing the retry.


async def test_a_retry_racing_a_newer_versions_submission_never_reopens_the_stale_version(
    db, database_url, sync_db, service, lifecycle
):
    old = (await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=1))).job
    await factories.set_state(db, old.job_id, JobState.FAILED)
    gate = await factories.insert_job(db)

    with psycopg.connect(database_url) as holder:
        # The batch submits version 2 (its resource head locked and advanced, the old job's supersede
        # already run), then stops at its second item, which waits for the gate's row: uncommitted.
        holder.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", (gate.job_id,))
        newer = [
            factories.new_job(resource_key="doc", resource_version=2),
            factories.new_job(depends_on=(gate.job_id,)),
        ]
        submitting = asyncio.create_task(service.submit_many(TENANT, ACTOR, newer))
        await wait_until(lambda: _pool_backends_waiting_on_a_lock(sync_db) == 1, what="the batch to stop at the gate")

        retrying = asyncio.create_task(lifecycle.retry(TENANT, ACTOR, old.job_id, "again", accept_duplicate_risk=False))
        await wait_until(
            lambda: retrying.done() or _pool_backends_waiting_on_a_lock(sync_db) == 2,
            what="the retry to finish or to wait for the resource head",
        )
        holder.rollback()
        # Unpacked in a second step: mypy cannot type the names when they take gather's result directly.
        outcomes = await asyncio.gather(submitting, retrying, return_exceptions=True)
        submitted, retried = outcomes

    assert not isinstance(submitted, BaseException), submitted
    assert isinstance(retried, FailedPrecondition), f"the stale version was reopened: {retried!r}"
    assert retried.reason == "NEWER_VERSION_EXISTS"
    assert sync_db.job(old.job_id)["state"] == "failed"


# The consent to a duplicate effect.


async def _cancel_then_fail_unknown(db, lifecycle, reports) -> JobId:
    """A cancel requested while the attempt ran, which then ended with an unknown outcome."""
    claimed = await factories.insert_and_claim(db)
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "stop")
    outcome = await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.OUTCOME_UNKNOWN, "timed out"))
    assert outcome.state is JobState.CANCELLED
    return claimed.job_id


async def _unknown_then_cancelled(db, lifecycle, reports) -> JobId:
    """OUTCOME_UNKNOWN, then a person cancelled it."""
    claimed = await factories.insert_and_claim(db)
    outcome = await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.OUTCOME_UNKNOWN, "timed out"))
    assert outcome.state is JobState.OUTCOME_UNKNOWN
    assert (await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "decided")).state is JobState.CANCELLED
    return claimed.job_id


async def _cancelled_after_an_unconfirmed_call(db, lifecycle, reports) -> JobId:
    """Cancel requested, an external call's intent recorded and never confirmed, the worker gone: the
    lease sweep ends it CANCELLED."""
    claimed = await factories.insert_and_claim(db)
    async with db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease_of(claimed), "charge", b"ch_1")
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "stop")
    await factories.expire_lease(db, claimed.job_id)
    (rescued,) = await factories.rescue_expired(db)
    assert rescued.state is JobState.CANCELLED
    return claimed.job_id


async def _released_cancelled_after_an_unconfirmed_call(db, lifecycle, reports) -> JobId:
    """Cancel requested after an unconfirmed external call; the worker hands the job back."""
    claimed = await factories.insert_and_claim(db)
    async with db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease_of(claimed), "charge", b"ch_1")
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "stop")
    released = await reports.release(WORKER_ID, lease_of(claimed), started=True, reason="cancelled")
    assert released is JobState.CANCELLED
    return claimed.job_id


UNKNOWN_OUTCOMES_THAT_END_CANCELLED = {
    "cancel during an attempt that ends unknown": _cancel_then_fail_unknown,
    "unknown, then cancelled": _unknown_then_cancelled,
    "cancelled, lease expired after an unconfirmed call": _cancelled_after_an_unconfirmed_call,
    "cancelled, released after an unconfirmed call": _released_cancelled_after_an_unconfirmed_call,
}


@pytest.mark.parametrize("path", UNKNOWN_OUTCOMES_THAT_END_CANCELLED)
async def test_a_cancelled_job_whose_latest_outcome_is_unknown_needs_the_duplicate_risk_accepted(
    db, sync_db, lifecycle, reports, path
):
    job_id = await UNKNOWN_OUTCOMES_THAT_END_CANCELLED[path](db, lifecycle, reports)
    assert sync_db.job(job_id)["state"] == "cancelled"
    before = sync_db.snapshot()

    await _refused(
        lifecycle.retry(TENANT, ACTOR, job_id, "again", accept_duplicate_risk=False), "DUPLICATE_RISK_NOT_ACCEPTED"
    )
    assert sync_db.snapshot() == before

    reopened = await lifecycle.retry(TENANT, ACTOR, job_id, "checked the provider", accept_duplicate_risk=True)
    assert reopened.state is JobState.PENDING
    reason = sync_db.one("SELECT reason FROM job_events WHERE job_id = %s ORDER BY sequence DESC LIMIT 1", (job_id,))
    assert reason["reason"].endswith("(duplicate risk accepted)")


async def test_consent_covers_the_attempt_it_was_given_for_and_is_asked_again_after_the_next(
    db, sync_db, lifecycle, reports
):
    claimed = await factories.insert_and_claim(db)
    await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.OUTCOME_UNKNOWN, "timed out"))
    await lifecycle.retry(TENANT, ACTOR, claimed.job_id, "checked", accept_duplicate_risk=True)
    # Cancelled before another attempt ran: the consent already given still covers attempt 1.
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "later")
    assert (await lifecycle.retry(TENANT, ACTOR, claimed.job_id, "now", accept_duplicate_risk=False)).state is (
        JobState.PENDING
    )

    again = await factories.claim_one(db)
    assert again.attempt == 2
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "stop")
    await reports.fail(WORKER_ID, lease_of(again), JobError(ErrorCategory.OUTCOME_UNKNOWN, "timed out"))
    assert sync_db.job(claimed.job_id)["state"] == "cancelled"

    await _refused(
        lifecycle.retry(TENANT, ACTOR, claimed.job_id, "again", accept_duplicate_risk=False),
        "DUPLICATE_RISK_NOT_ACCEPTED",
    )


@pytest.mark.parametrize("confirmed", [True, False])
async def test_a_job_that_failed_or_was_cancelled_with_every_call_confirmed_needs_no_consent(
    db, lifecycle, reports, confirmed
):
    failed = await factories.insert_and_claim(db)
    await reports.fail(WORKER_ID, lease_of(failed), JobError(ErrorCategory.PERMANENT, "bad input"))
    cancelled = await factories.insert_and_claim(db)
    if confirmed:
        async with db.transaction() as conn:
            assert await receipt_store.record_intent(conn, lease_of(cancelled), "charge", b"ch_1")
            assert await receipt_store.confirm_receipt(conn, lease_of(cancelled), "charge", b"ok")
    await lifecycle.cancel(TENANT, ACTOR, cancelled.job_id, "stop")
    await reports.fail(WORKER_ID, lease_of(cancelled), JobError(ErrorCategory.RETRYABLE, "interrupted"))

    for job_id in (failed.job_id, cancelled.job_id):
        reopened = await lifecycle.retry(TENANT, ACTOR, job_id, "again", accept_duplicate_risk=False)
        assert reopened.state is JobState.PENDING


# As the API's database role, behind row-level security.


@pytest.fixture
async def api_db(database_url: str, service_logins: ServiceLogins) -> AsyncIterator[Database]:
    db = await Database.open(
        PoolSettings(ServiceLogins.url(database_url, service_logins.api), max_size=2, application_name="jobs-api"),
        wait=True,
    )
    try:
        yield db
    finally:
        await db.close()


async def test_the_retry_checks_run_as_jobs_api_and_see_only_the_tenants_rows(db, api_db, reports):
    await factories.published_kinds(db)  # as a worker would have
    service = SubmissionService(api_db, KindCatalog(api_db), SubmissionLimits())
    lifecycle = JobLifecycle(api_db)
    dependency = (await service.submit(TENANT, ACTOR, factories.new_job())).job
    job = (
        await service.submit(
            TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=1, depends_on=(dependency.job_id,))
        )
    ).job
    await factories.set_state(db, dependency.job_id, JobState.SUCCEEDED)
    claimed = await factories.claim_one(db)
    assert claimed.job_id == job.job_id
    async with db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease_of(claimed), "charge", b"ch_1")
    await lifecycle.cancel(TENANT, ACTOR, job.job_id, "stop")
    await reports.release(WORKER_ID, lease_of(claimed), started=True, reason="cancelled")

    await _refused(
        lifecycle.retry(TENANT, ACTOR, job.job_id, "again", accept_duplicate_risk=False), "DUPLICATE_RISK_NOT_ACCEPTED"
    )
    with pytest.raises(NotFound):
        await lifecycle.retry(TenantId("tenant-b"), "tenant:tenant-b", job.job_id, "", accept_duplicate_risk=True)
    reopened = await lifecycle.retry(TENANT, ACTOR, job.job_id, "checked", accept_duplicate_risk=True)
    assert reopened.state is JobState.PENDING
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=2))
    assert (await JobQueries(api_db).get_job(TENANT, job.job_id)).state is JobState.SUPERSEDED
