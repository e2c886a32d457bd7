"""Sequences over a real database: one job of a key at a time, in acceptance order, whoever claims; a failed
job halts its sequence until it is retried or cancelled; cancel, supersede and dependencies keep their
meaning inside a sequence."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import pytest

from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import FailedPrecondition
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import ClaimedJob, Completion, ErrorCategory, Job, JobError, JobState, LeaseRef
from shared.domain.limit_keys import WaitingReason
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store, scheduling_store
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.conditions import wait_until
from tests.database_roles import ServiceLogins

pytestmark = pytest.mark.timeout(60)
A = factories.TENANT_DEFAULT
B = TenantId("tenant-b")


async def _submit(service: SubmissionService, tenant: TenantId = A, **fields) -> Job:
    return (await service.submit(tenant, f"tenant:{tenant}", factories.new_job(**fields))).job


async def _complete(db: Database, claimed: ClaimedJob) -> None:
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(claimed.job_id, claimed.fencing_token, b"done")]
        )


async def _fail(db: Database, claimed: ClaimedJob, category: ErrorCategory = ErrorCategory.PERMANENT) -> None:
    async with db.transaction() as conn:
        await lease_store.fail_attempt(
            conn, worker_id="w", lease=LeaseRef(claimed.job_id, claimed.fencing_token), error=JobError(category, "no")
        )


async def _waiting(db: Database, job_id: JobId, tenant: TenantId = A) -> WaitingReason | None:
    async with db.transaction() as conn:
        return await scheduling_store.waiting_reason(conn, tenant, job_id)


async def test_a_sequence_runs_one_job_at_a_time_in_the_order_accepted(db):
    service = await factories.submission_service(db)
    jobs = [await _submit(service, sequence_key="doc-1", payload=str(i).encode()) for i in range(3)]
    other = await _submit(service, sequence_key="doc-2")
    assert [j.sequence_key for j in jobs] == ["doc-1"] * 3

    first = await factories.claim(db, limit=10)
    assert sorted(c.job_id for c in first) == sorted([jobs[0].job_id, other.job_id])
    assert await _waiting(db, jobs[1].job_id) == WaitingReason("sequence_waiting", "doc-1")

    order = [jobs[0].job_id]
    await _complete(db, next(c for c in first if c.job_id == jobs[0].job_id))
    for _ in range(2):
        (claimed,) = await factories.claim(db, limit=10)
        order.append(claimed.job_id)
        assert await factories.claim(db, limit=10) == []
        await _complete(db, claimed)
    assert order == [j.job_id for j in jobs]


async def test_a_failed_job_halts_its_sequence_until_it_is_retried(db):
    service = await factories.submission_service(db)
    first, second = [await _submit(service, sequence_key="doc") for _ in range(2)]
    await _fail(db, await factories.claim_one(db))

    assert await factories.claim(db, limit=10) == []
    assert await _waiting(db, second.job_id) == WaitingReason("sequence_halted", "doc")

    await JobLifecycle(db).retry(A, "tenant:a", first.job_id, "fixed", accept_duplicate_risk=False)
    again = await factories.claim_one(db)
    assert again.job_id == first.job_id
    await _complete(db, again)
    assert (await factories.claim_one(db)).job_id == second.job_id


async def test_cancelling_the_failed_job_lets_its_sequence_go_on(db):
    service = await factories.submission_service(db)
    first, second = [await _submit(service, sequence_key="doc") for _ in range(2)]
    await _fail(db, await factories.claim_one(db), ErrorCategory.OUTCOME_UNKNOWN)
    assert await _waiting(db, second.job_id) == WaitingReason("sequence_halted", "doc")

    cancelled = await JobLifecycle(db).cancel(A, "tenant:a", first.job_id, "skip it")
    assert cancelled.state is JobState.CANCELLED
    assert (await factories.claim_one(db)).job_id == second.job_id


async def test_a_failed_job_outside_a_sequence_still_cannot_be_cancelled(db):
    service = await factories.submission_service(db)
    job = await _submit(service)
    await _fail(db, await factories.claim_one(db))
    with pytest.raises(FailedPrecondition):
        await JobLifecycle(db).cancel(A, "tenant:a", job.job_id, "")
    assert job.sequence_key is None


async def test_cancel_supersede_and_dependencies_keep_their_meaning_inside_a_sequence(db, sync_db):
    service = await factories.submission_service(db)
    head = await _submit(service, sequence_key="doc", resource_key="doc", resource_version=1)
    cancelled = await _submit(service, sequence_key="doc")
    blocked_on = await _submit(service)
    dependent = await _submit(service, sequence_key="doc", depends_on=(blocked_on.job_id,))
    last = await _submit(service, sequence_key="doc")
    await JobLifecycle(db).cancel(A, "tenant:a", cancelled.job_id, "")

    # A newer version supersedes the head, which lets the sequence go on; the cancelled job is passed over.
    newer = await _submit(service, sequence_key="doc", resource_key="doc", resource_version=2)
    assert sync_db.job(head.job_id)["state"] == "superseded"
    assert sync_db.job(dependent.job_id)["parked_on"] is None
    # The next in line waits for its dependency, and the jobs behind it wait for it.
    assert sync_db.job(dependent.job_id)["state"] == "blocked"
    claimed = await factories.claim_one(db)
    assert claimed.job_id == blocked_on.job_id
    assert await factories.claim(db, limit=10) == []
    await _complete(db, claimed)
    for expected in (dependent, last, newer):
        claimed = await factories.claim_one(db)
        assert claimed.job_id == expected.job_id
        await _complete(db, claimed)


async def test_sequences_are_scoped_to_their_tenant(db):
    service = await factories.submission_service(db)
    await _submit(service, A, sequence_key="doc")
    await _submit(service, B, sequence_key="doc")
    assert len(await factories.claim(db, limit=10)) == 2


async def test_a_retried_job_waits_behind_the_sequences_head(db, sync_db):
    service = await factories.submission_service(db)
    first, second = [await _submit(service, sequence_key="doc") for _ in range(2)]
    await JobLifecycle(db).cancel(A, "tenant:a", first.job_id, "")
    running = await factories.claim_one(db)
    assert running.job_id == second.job_id

    await JobLifecycle(db).retry(A, "tenant:a", first.job_id, "", accept_duplicate_risk=False)
    assert sync_db.job(first.job_id)["parked_on"] == ""
    assert await factories.claim(db, limit=10) == []
    await _complete(db, running)
    assert (await factories.claim_one(db)).job_id == first.job_id


async def _claim_and_finish(db: Database, worker: str, rng: random.Random, idle: asyncio.Event) -> None:
    """One claimer: claims small batches and ends each job after a little while, one attempt in five with
    a retryable failure (retried at once)."""
    while not idle.is_set():
        claimed = await factories.claim(db, limit=rng.randint(1, 4), worker_id=worker)
        if not claimed:
            await asyncio.sleep(0.005)
            continue
        await asyncio.sleep(rng.random() * 0.01)
        for job in claimed:
            if rng.random() < 0.2:
                await _fail(db, job, ErrorCategory.RETRYABLE)
            else:
                await _complete(db, job)


async def test_racing_claimers_never_run_two_jobs_of_one_sequence_and_keep_each_sequences_order(db, sync_db):
    service = await factories.submission_service(db)
    submitted: dict[str, list[JobId]] = defaultdict(list)
    for round_ in range(6):
        for key in ("s1", "s2", "s3", "s4"):
            job = await _submit(service, sequence_key=key, payload=f"{key}-{round_}".encode(), max_attempts=10)
            submitted[key].append(job.job_id)
    idle = asyncio.Event()
    claimers = [asyncio.create_task(_claim_and_finish(db, f"w{i}", random.Random(i), idle)) for i in range(4)]
    try:
        await wait_until(
            lambda: sync_db.one("SELECT count(*) AS n FROM jobs WHERE state <> 'succeeded'")["n"] == 0,
            within_seconds=40,
            what="every job of every sequence succeeded",
        )
    finally:
        idle.set()
        await asyncio.gather(*claimers)

    # Every attempt's start and end, from the history: per sequence, no attempt starts before the one
    # before it ended, and the jobs start in the order they were accepted.
    events = sync_db.rows(
        "SELECT e.job_id::text AS job_id, j.sequence_key, e.to_state, e.at FROM job_events AS e"
        " JOIN jobs AS j USING (job_id) WHERE j.sequence_key IS NOT NULL ORDER BY e.at, e.sequence"
    )
    running: dict[str, str | None] = defaultdict(lambda: None)
    started: dict[str, list[str]] = defaultdict(list)
    for event in events:
        key = event["sequence_key"]
        if event["to_state"] == "running":
            assert running[key] in (None, event["job_id"]), f"two jobs of {key} ran at once"
            running[key] = event["job_id"]
            if event["job_id"] not in started[key]:
                started[key].append(event["job_id"])
        elif running[key] == event["job_id"]:
            running[key] = None
    assert dict(started) == {key: [str(j) for j in ids] for key, ids in submitted.items()}


async def test_the_job_joining_a_sequence_waits_while_its_head_completes_concurrently(db, sync_db):
    """A submission that finds the head share-locks it: the head's completion waits for the submission to
    commit, and then releases the new job; never does the new job wait behind a head that has ended."""
    service = await factories.submission_service(db)
    for _ in range(20):
        await _submit(service, sequence_key="race")
        head = await factories.claim_one(db)
        joined, _ = await asyncio.gather(_submit(service, sequence_key="race"), _complete(db, head))
        assert sync_db.job(joined.job_id)["parked_on"] is None, "the new job was left behind an ended head"
        claimed = await factories.claim_one(db)
        assert claimed.job_id == joined.job_id
        await _complete(db, claimed)


async def _as_role(database_url: str, role: str) -> Database:
    return await Database.open(
        PoolSettings(ServiceLogins.url(database_url, role), max_size=2, application_name=role), wait=True
    )


async def test_a_sequence_goes_on_as_the_services_roles_run_it(db, database_url, service_logins, sync_db):
    """Behind row-level security: a worker claims; the API submits, cancels and stores the workers' reports;
    each end releases the next job, a waiting job failed by its deadline included."""
    await factories.published_kinds(db)
    api_db, worker_db = (
        await _as_role(database_url, service_logins.api),
        await _as_role(database_url, service_logins.worker),
    )
    try:
        service = SubmissionService(api_db, KindCatalog(api_db), SubmissionLimits())
        first, second, third, fourth = [await _submit(service, sequence_key="doc") for _ in range(4)]
        sync_db.execute("UPDATE jobs SET state = 'failed', finished_at = now() WHERE job_id = %s", (second.job_id,))
        await _complete(api_db, await factories.claim_one(worker_db))
        assert sync_db.job(second.job_id)["parked_on"] is None, "the failed job is now the sequence's head"
        assert await _waiting(api_db, third.job_id) == WaitingReason("sequence_halted", "doc")

        await JobLifecycle(api_db).cancel(A, "tenant:a", second.job_id, "skip")
        claimed = await factories.claim_one(worker_db)
        assert claimed.job_id == third.job_id
        await _fail(api_db, claimed)
        await JobLifecycle(api_db).retry(A, "tenant:a", third.job_id, "again", accept_duplicate_risk=False)
        await _complete(api_db, await factories.claim_one(worker_db))
        assert (await factories.claim_one(worker_db)).job_id == fourth.job_id
        assert first.job_id != fourth.job_id
    finally:
        await api_db.close()
        await worker_db.close()
