"""Retry hints and pushbacks over a real database: a pushback does not use up an attempt and the job
waits until the time given; a retry hint replaces the backoff; batch reports answer refusals as values."""

from __future__ import annotations

import pickle
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import InvalidArgument
from shared.domain.ids import FencingToken
from shared.domain.jobs import (
    PUSHBACKS_UNCOUNTED_MAX,
    RETRY_AFTER_MAX_SECONDS,
    ClaimedJob,
    Completion,
    ErrorCategory,
    FailOutcome,
    FailureReport,
    JobError,
    JobState,
    LeaseRef,
    ReleaseReport,
    ReportOutcome,
    RetryHint,
)
from shared.domain.limit_keys import WaitingReason
from shared.handlers import PushedBack, RetryableError
from shared.storage import receipt_store, scheduling_store
from shared.storage.database import Database
from tests import factories
from tests.db_fixtures import SyncProbe

pytestmark = pytest.mark.timeout(60)

WORKER_ID = "worker-1"
KEY = "provider:openai"


class CountingRejections:
    def __init__(self) -> None:
        self.counts: Counter[ReportOutcome] = Counter()

    def rejected(self, outcome: ReportOutcome) -> None:
        self.counts[outcome] += 1


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, CountingRejections(), lease_max_seconds=3600)


def lease_of(claimed: ClaimedJob) -> LeaseRef:
    return LeaseRef(claimed.job_id, claimed.fencing_token)


def db_now(sync_db: SyncProbe) -> datetime:
    now: datetime = sync_db.one("SELECT clock_timestamp() AS now")["now"]
    return now


def pushback(claimed: ClaimedJob, seconds: float, key: str | None = KEY) -> FailureReport:
    return FailureReport(
        lease_of(claimed), JobError(ErrorCategory.RETRYABLE, "429 Too Many Requests"), RetryHint(seconds, True, key)
    )


async def make_runnable_again(db: Database, claimed: ClaimedJob) -> ClaimedJob:
    """Moves the job's wait into the past (arranged, not waited for) and claims it again."""
    async with db.transaction() as conn:
        await conn.execute("UPDATE jobs SET run_after = clock_timestamp() WHERE job_id = %s", (claimed.job_id,))
    again = await factories.claim_one(db)
    assert again.job_id == claimed.job_id
    return again


async def test_a_pushed_back_job_keeps_its_only_attempt_and_waits_until_told(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db, max_attempts=1)
    tokens = [claimed.fencing_token]
    for _ in range(2):
        before = db_now(sync_db)
        (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 120)])
        row = sync_db.job(claimed.job_id)
        assert isinstance(outcome, FailOutcome) and outcome.state is JobState.PENDING
        assert row["state"] == "pending" and row["attempts"] == 0, "a pushback is not an attempt"
        assert row["run_after"] >= before + timedelta(seconds=120), "the job waits until the time given"
        assert outcome.next_attempt_at == row["run_after"]
        assert not await factories.claim(db), "nothing is runnable before that time"
        claimed = await make_runnable_again(db, claimed)
        assert claimed.attempt == 1
        tokens.append(claimed.fencing_token)

    assert await reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"done"))
    row = sync_db.job(claimed.job_id)
    assert (row["state"], row["attempts"], row["max_attempts"]) == ("succeeded", 1, 1)
    assert tokens == sorted(set(tokens)), "the fencing token still rises with every claim"
    events = sync_db.rows(
        "SELECT to_state, attempt, reason, at FROM job_events WHERE job_id = %s ORDER BY sequence", (claimed.job_id,)
    )
    pushed = [e for e in events if e["reason"].startswith("pushed back until ")]
    assert len(pushed) == 2
    assert all(e["to_state"] == "pending" and f"(key {KEY})" in e["reason"] for e in pushed)
    assert all("429 Too Many Requests" in e["reason"] for e in pushed)
    assert not sync_db.rows("SELECT 1 FROM job_attempt_errors WHERE job_id = %s", (claimed.job_id,))


async def test_a_pushback_on_a_key_holds_every_job_that_carries_it_until_then(db, sync_db, reports):
    factories.declare_kind_keys(sync_db, "echo", [KEY])
    await factories.insert_jobs(db, 3)
    await factories.insert_jobs(db, 2, kind="sleep")  # carries no provider key
    claimed = await factories.claim_one(db)

    (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 120)])

    assert isinstance(outcome, FailOutcome)
    held = sync_db.one("SELECT held_until FROM job_key_state WHERE key = %s", (KEY,))
    assert held is not None and held["held_until"] == outcome.next_attempt_at
    again = await factories.claim(db, kinds=("echo", "sleep"), limit=10)
    assert [job.kind for job in again] == ["sleep", "sleep"], "the key's other jobs wait out the hold"
    other = sync_db.one("SELECT job_id FROM jobs WHERE kind = 'echo' AND job_id <> %s LIMIT 1", (claimed.job_id,))
    async with db.transaction() as conn:
        why = await scheduling_store.waiting_reason(conn, factories.TENANT_DEFAULT, other["job_id"])
    assert why == WaitingReason("key_held", KEY)


async def test_a_pushback_on_a_key_the_job_does_not_carry_holds_nothing(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)

    (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 120, key="provider:someone-else")])

    assert isinstance(outcome, FailOutcome) and outcome.state is JobState.PENDING
    assert sync_db.rows("SELECT key FROM job_key_state") == []


async def test_a_retry_hint_replaces_the_backoff(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db, backoff_base_seconds=0.0, backoff_cap_seconds=0.0)
    before = db_now(sync_db)
    outcome = await reports.fail(
        WORKER_ID, lease_of(claimed), JobError(ErrorCategory.RETRYABLE, "busy"), RetryHint(600)
    )
    row = sync_db.job(claimed.job_id)
    assert outcome.state is JobState.RETRY_WAIT and row["attempts"] == 1, "a retry hint still counts the attempt"
    assert row["run_after"] >= before + timedelta(seconds=600)


async def test_a_retry_hint_longer_than_the_maximum_is_cut(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.RETRYABLE, "x"), RetryHint(10**9))
    after = db_now(sync_db)
    assert sync_db.job(claimed.job_id)["run_after"] <= after + timedelta(seconds=RETRY_AFTER_MAX_SECONDS)


async def test_a_negative_retry_hint_is_invalid(db, reports):
    claimed = await factories.insert_and_claim(db)
    with pytest.raises(InvalidArgument) as raised:
        await reports.fail_many(WORKER_ID, [pushback(claimed, -1)])
    assert raised.value.violations[0].field == "failures[0].retry_after"


async def test_a_pushback_past_the_deadline_fails_the_job(db, sync_db, reports):
    deadline = db_now(sync_db) + timedelta(seconds=300)
    claimed = await factories.insert_and_claim(db, deadline=deadline)
    (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 3600)])
    row = sync_db.job(claimed.job_id)
    assert isinstance(outcome, FailOutcome) and outcome.state is JobState.FAILED
    assert row["last_error_message"].startswith("deadline")


async def test_pushbacks_beyond_the_uncounted_ones_use_up_attempts(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db, max_attempts=1)
    for _ in range(PUSHBACKS_UNCOUNTED_MAX):
        (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 0, None)])
        assert isinstance(outcome, FailOutcome) and outcome.state is JobState.PENDING
        claimed = await factories.claim_one(db)
    (outcome,) = await reports.fail_many(WORKER_ID, [pushback(claimed, 0, None)])
    row = sync_db.job(claimed.job_id)
    assert isinstance(outcome, FailOutcome) and outcome.state is JobState.FAILED, "a job pushed back forever ends"
    assert row["last_error_message"].startswith("pushed back on the final attempt")


async def test_a_pushback_after_a_receipt_counts_the_attempt(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db, max_attempts=2)
    async with db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease_of(claimed), "upload", b"")
        assert await receipt_store.confirm_receipt(conn, lease_of(claimed), "upload", b"ok")
    await reports.fail_many(WORKER_ID, [pushback(claimed, 0)])
    row = sync_db.job(claimed.job_id)
    assert (row["state"], row["attempts"]) == ("pending", 1), "attempt numbers stay unique for the receipts"


async def test_batch_failures_answer_refusals_as_values(db, sync_db, reports):
    fresh = await factories.insert_and_claim(db)
    stale = await factories.insert_and_claim(db)
    stale_lease = LeaseRef(stale.job_id, FencingToken(stale.fencing_token + 1))
    cancelled = await factories.insert_and_claim(db)
    await factories.set_state(db, cancelled.job_id, JobState.CANCELLED, cancel_requested=True)
    error = JobError(ErrorCategory.RETRYABLE, "boom")
    before = sync_db.job(stale.job_id)

    outcomes = await reports.fail_many(
        WORKER_ID,
        [
            FailureReport(lease_of(fresh), error),
            FailureReport(stale_lease, error),
            FailureReport(lease_of(cancelled), error),
        ],
    )

    assert isinstance(outcomes[0], FailOutcome) and outcomes[0].state is JobState.RETRY_WAIT
    assert outcomes[1:] == [ReportOutcome.LEASE_LOST, ReportOutcome.JOB_CANCELLED]
    assert sync_db.job(stale.job_id) == before, "a refused report changes nothing"


async def test_batch_releases_answer_refusals_as_values(db, sync_db, reports):
    fresh = await factories.insert_and_claim(db)
    superseded = await factories.insert_and_claim(db)
    await factories.set_state(db, superseded.job_id, JobState.SUPERSEDED)
    outcomes = await reports.release_many(
        WORKER_ID,
        [
            ReleaseReport(lease_of(superseded), False, "shutdown"),
            ReleaseReport(lease_of(fresh), False, "shutdown"),
        ],
    )
    assert outcomes == [ReportOutcome.JOB_SUPERSEDED, JobState.PENDING]
    assert sync_db.job(fresh.job_id)["attempts"] == 0


async def test_a_batch_naming_a_job_twice_is_invalid(db, reports):
    claimed = await factories.insert_and_claim(db)
    report = ReleaseReport(lease_of(claimed), False, "x")
    with pytest.raises(InvalidArgument):
        await reports.release_many(WORKER_ID, [report, report])


def test_a_pushback_names_exactly_one_wait():
    with pytest.raises(ValueError):
        PushedBack("x")
    with pytest.raises(ValueError):
        PushedBack("x", retry_after=1, until=datetime.now(UTC))
    with pytest.raises(ValueError):
        PushedBack("x", until=datetime(2030, 1, 1))  # naive: whose clock?
    with pytest.raises(ValueError):
        RetryableError("x", retry_after=-1)


def test_hints_survive_the_trip_from_a_process_handler():
    until = datetime(2030, 1, 1, tzinfo=UTC)
    pushed = pickle.loads(pickle.dumps(PushedBack("429", until=until, key="provider:x")))
    assert (str(pushed), pushed.until, pushed.key, pushed.retry_after_seconds) == ("429", until, "provider:x", None)
    assert pushed.wait_seconds(until - timedelta(seconds=5)) == 5
    retry = pickle.loads(pickle.dumps(RetryableError("busy", retry_after=timedelta(minutes=1))))
    assert (str(retry), retry.retry_after_seconds) == ("busy", 60)
