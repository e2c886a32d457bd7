"""De-duplication by input through the real submission use-case: which jobs an identical submission
attaches to, and which it never does (docs/API.md, "De-duplication by input")."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from api_service.usecases.submission import SubmissionService
from shared.domain.errors import InvalidArgument
from shared.domain.idempotency import input_digest
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobState, NewJob
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import job_store, queries
from shared.storage.database import Database
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)

TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT
WINDOW_SECONDS = 600.0
CONCURRENT_SUBMITS = 20


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(
        db, await factories.published_kinds(db), SubmissionLimits(), dedupe_window_seconds=WINDOW_SECONDS
    )


def deduped(**fields) -> NewJob:
    fields.setdefault("payload", b"the document text")
    return factories.new_job(dedupe_by_input=True, **fields)


async def submit(service: SubmissionService, job: NewJob, tenant: TenantId = TENANT) -> tuple[JobId, bool]:
    outcome = await service.submit(tenant, f"tenant:{tenant}", job)
    return outcome.job.job_id, outcome.created


def job_count(sync_db) -> int:
    return sync_db.one("SELECT count(*) AS n FROM jobs")["n"]


async def test_concurrent_identical_submissions_attach_to_one_job(service, sync_db):
    answers = await asyncio.gather(*(submit(service, deduped()) for _ in range(CONCURRENT_SUBMITS)))

    assert len({job_id for job_id, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1
    assert job_count(sync_db) == 1


async def test_a_submission_waits_for_an_identical_one_in_flight_and_attaches_to_it(db, service, sync_db):
    job = deduped()
    digest = input_digest(job)
    async with db.transaction() as conn:
        await job_store.lock_input(conn, TENANT, job, digest)
        waiting = asyncio.ensure_future(submit(service, deduped()))
        await wait_until(lambda: advisory_lock_waiters(sync_db) == 1, what="the submission to wait for the input lock")
        first = await job_store.insert_job(conn, job, replace(factories.insert_params(), input_digest=digest))

    attached, created = await waiting

    assert first is not None
    assert (attached, created) == (first.job_id, False)
    assert job_count(sync_db) == 1


def advisory_lock_waiters(sync_db) -> int:
    return sync_db.one(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    )["n"]


@pytest.mark.parametrize(
    "state", [JobState.PENDING, JobState.BLOCKED, JobState.RETRY_WAIT, JobState.RUNNING, JobState.SUCCEEDED]
)
async def test_a_waiting_running_or_recently_succeeded_original_is_attached_to(db, service, state):
    original, _ = await submit(service, deduped())
    if state is JobState.RUNNING:
        await factories.claim_one(db)
    elif state is not JobState.PENDING:
        await factories.set_state(db, original, state)

    attached, created = await submit(service, deduped())

    assert (attached, created) == (original, False)


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED, JobState.OUTCOME_UNKNOWN])
async def test_an_original_that_failed_or_was_cancelled_superseded_or_left_unknown_gets_a_new_job(db, service, state):
    original, _ = await submit(service, deduped())
    await factories.set_state(db, original, state)

    again, created = await submit(service, deduped())

    assert created and again != original


async def test_a_success_older_than_the_window_gets_a_new_job(db, service, sync_db):
    original, _ = await submit(service, deduped())
    await factories.set_state(db, original, JobState.SUCCEEDED)
    sync_db.execute(
        "UPDATE jobs SET finished_at = clock_timestamp() - make_interval(secs => %s) WHERE job_id = %s",
        (WINDOW_SECONDS + 1, original),
    )

    again, created = await submit(service, deduped())

    assert created and again != original


async def test_a_running_original_with_a_cancel_request_is_not_attached_to(db, service, sync_db):
    original, _ = await submit(service, deduped())
    await factories.claim_one(db)
    sync_db.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (original,))

    again, created = await submit(service, deduped())

    assert created and again != original


@pytest.mark.parametrize(
    "different",
    [
        {"payload": b"another text"},
        {"kind": "sleep", "payload": b'{"seconds": 0}'},
        {"resource_key": "doc", "resource_version": 2},
    ],
    ids=["payload", "kind", "resource_version"],
)
async def test_only_the_same_kind_payload_and_resource_version_attach(service, different):
    original, _ = await submit(service, deduped(resource_key="doc", resource_version=1))

    other, created = await submit(service, deduped(**{"resource_key": "doc", "resource_version": 1, **different}))

    assert created and other != original


async def test_another_tenants_identical_job_is_never_attached_to(service):
    mine, _ = await submit(service, deduped())

    theirs, created = await submit(service, deduped(), tenant=TenantId("tenant-b"))

    assert created and theirs != mine


async def test_only_jobs_submitted_with_dedupe_are_attached_to_and_only_by_such_submissions(service):
    plain, _ = await submit(service, factories.new_job(payload=b"the document text"))

    first_deduped, created = await submit(service, deduped())
    assert created and first_deduped != plain
    another_plain, created = await submit(service, factories.new_job(payload=b"the document text"))
    assert created and another_plain != first_deduped


async def test_identical_items_of_one_batch_attach_to_the_first(service, sync_db):
    outcomes = await service.submit_many(TENANT, ACTOR, [deduped(), deduped(), deduped(payload=b"other")])

    assert [o.created for o in outcomes] == [True, False, True]
    assert outcomes[1].job.job_id == outcomes[0].job.job_id
    assert job_count(sync_db) == 2


async def test_dedupe_with_an_idempotency_key_is_refused(service, sync_db):
    with pytest.raises(InvalidArgument) as refused:
        await submit(service, deduped(idempotency_key="order-7"))

    assert [v.field for v in refused.value.violations] == ["dedupe_by_input"]
    assert job_count(sync_db) == 0


async def test_the_lookup_reads_the_dedupe_index(service, sync_db):
    await submit(service, deduped())
    sync_db.execute("SET enable_seqscan = off")
    params = {
        "tenant": TENANT,
        "kind": "echo",
        "input_digest": bytes(32),
        "resource_key": None,
        "resource_version": None,
        "window_seconds": WINDOW_SECONDS,
    }

    plan = "\n".join(row["QUERY PLAN"] for row in sync_db.rows("EXPLAIN " + queries.JOB_FIND_ATTACHABLE, params))

    assert "jobs_dedupe_input_idx" in plan, plan
