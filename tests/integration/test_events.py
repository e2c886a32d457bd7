"""Every transition leaves a job_events row: who moved the job from where to where, under which lease, why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import JobCancelled
from shared.domain.jobs import Completion, ErrorCategory, JobError, LeaseRef
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store
from tests import factories

pytestmark = pytest.mark.timeout(30)

WORKER = "worker-1"
TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT


class IgnoredRejections:
    def rejected(self, outcome) -> None:
        pass


@pytest.fixture
def reports(db) -> WorkerReports:
    return WorkerReports(db, IgnoredRejections(), lease_max_seconds=3600)


def events_of(sync_db, job_id: str) -> list[tuple]:
    rows = sync_db.rows(
        "SELECT sequence, from_state, to_state, attempt, fencing_token, actor, reason, tenant"
        " FROM job_events WHERE job_id = %s ORDER BY job_id, sequence",
        (job_id,),
    )
    return [tuple(row.values()) for row in rows]


async def test_a_job_through_retry_and_success_records_each_transition(db, sync_db, reports):
    job = await factories.insert_job(db)
    first = await factories.claim_one(db)
    await reports.heartbeat([LeaseRef(job.job_id, first.fencing_token)], extend_by_seconds=60)
    await reports.fail(WORKER, LeaseRef(job.job_id, first.fencing_token), JobError(ErrorCategory.RETRYABLE, "x"))
    second = await factories.claim_one(db, worker_id="worker-2")
    await reports.complete(WORKER, Completion(job.job_id, second.fencing_token, b"done"))

    tenant = "tenant-a"
    assert events_of(sync_db, job.job_id) == [
        (1, None, "pending", 0, 0, "tenant:tenant-a", "submitted", tenant),
        (2, "pending", "running", 1, 1, "worker:worker-1", "claimed", tenant),
        (3, "running", "retry_wait", 1, 1, "worker:worker-1", "attempt failed", tenant),
        (4, "retry_wait", "running", 2, 2, "worker:worker-2", "claimed", tenant),
        (5, "running", "succeeded", 2, 2, "worker:worker-1", "completed", tenant),
    ]
    assert sync_db.job(job.job_id)["sequence"] == 5


async def test_rescue_release_and_final_failure_are_recorded(db, sync_db, reports):
    job = await factories.insert_job(db, max_attempts=2)
    first = await factories.claim_one(db)
    await reports.release(WORKER, LeaseRef(job.job_id, first.fencing_token), started=False, reason="draining")
    await factories.claim_one(db)
    third = await factories.reclaim(db, job.job_id)
    await reports.fail(WORKER, LeaseRef(job.job_id, third.fencing_token), JobError(ErrorCategory.RETRYABLE, "x"))

    assert [event[:7] for event in events_of(sync_db, job.job_id)] == [
        (1, None, "pending", 0, 0, "tenant:tenant-a", "submitted"),
        (2, "pending", "running", 1, 1, "worker:worker-1", "claimed"),
        (3, "running", "pending", 0, 1, "worker:worker-1", "released: draining"),
        (4, "pending", "running", 1, 2, "worker:worker-1", "claimed"),
        (5, "running", "retry_wait", 1, 2, "system", "lease expired"),
        (6, "retry_wait", "running", 2, 3, "worker:worker-1", "claimed"),
        (7, "running", "failed", 2, 3, "worker:worker-1", "attempt failed"),
    ]


async def test_a_passed_deadline_is_recorded_as_a_system_transition(db, sync_db):
    job = await factories.insert_job(db, deadline=datetime.now(UTC) - timedelta(seconds=1))

    async with db.transaction() as conn:
        moved = (await lease_store.fail_past_deadline(conn, limit=10)).moved

    assert [t.job_id for t in moved] == [job.job_id]
    assert events_of(sync_db, job.job_id)[-1][:7] == (2, "pending", "failed", 0, 0, "system", "deadline")


async def test_sequences_rise_by_one_per_transition_and_match_the_job(db, sync_db, reports):
    jobs = await factories.insert_jobs(db, 5, max_attempts=5)
    for _ in range(3):
        for claimed in await factories.claim(db, limit=5):
            lease = LeaseRef(claimed.job_id, claimed.fencing_token)
            await reports.fail(WORKER, lease, JobError(ErrorCategory.RETRYABLE, "again"))

    for job in jobs:
        sequences = [event[0] for event in events_of(sync_db, job.job_id)]
        assert sequences == list(range(1, 8))
        assert sync_db.job(job.job_id)["sequence"] == sequences[-1]


async def test_a_heartbeat_is_not_a_transition(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    before = events_of(sync_db, claimed.job_id)

    await reports.heartbeat([LeaseRef(claimed.job_id, claimed.fencing_token)], extend_by_seconds=60)

    assert events_of(sync_db, claimed.job_id) == before


async def test_cancel_and_manual_retry_record_who_and_why(db, sync_db, reports):
    lifecycle = JobLifecycle(db)
    claimed = await factories.insert_and_claim(db)
    await lifecycle.cancel(TENANT, ACTOR, claimed.job_id, "wrong input")
    with pytest.raises(JobCancelled):
        await reports.complete(WORKER, Completion(claimed.job_id, claimed.fencing_token, b"late"))
    await lifecycle.retry(TENANT, ACTOR, claimed.job_id, "input fixed", accept_duplicate_risk=False)
    again = await factories.claim_one(db)

    assert [event[:7] for event in events_of(sync_db, claimed.job_id)][2:] == [
        (3, "running", "running", 1, 1, ACTOR, "cancel requested: wrong input"),
        (4, "running", "cancelled", 1, 1, "worker:worker-1", "cancelled; result discarded"),
        (5, "cancelled", "pending", 1, 1, ACTOR, f"manual retry by {ACTOR}: input fixed"),
        (6, "pending", "running", 2, 2, "worker:worker-1", "claimed"),
    ]
    assert again.fencing_token == 2


async def test_a_superseded_version_records_the_version_that_replaced_it(db, sync_db):
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    old = await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=1))
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=2))

    assert events_of(sync_db, old.job.job_id)[-1][:7] == (
        2,
        "pending",
        "superseded",
        0,
        0,
        ACTOR,
        "superseded by version 2",
    )
