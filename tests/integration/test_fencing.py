"""Worker reports are fenced: only the current lease holder writes, and a refused report changes nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import FailedPrecondition, InvalidArgument, JobCancelled, JobSuperseded, LeaseLost
from shared.domain.ids import FencingToken, JobId
from shared.domain.job_logs import LogLine
from shared.domain.jobs import (
    ClaimedJob,
    Completion,
    ErrorCategory,
    JobError,
    JobState,
    LeaseRef,
    ReleaseReport,
    ReportOutcome,
)
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import job_store, receipt_store
from shared.storage.database import Database
from tests import factories
from tests.conditions import wait_until
from tests.db_fixtures import POOL_APPLICATION_NAME

pytestmark = pytest.mark.timeout(30)

WORKER_ID = "worker-1"
TENANT = factories.TENANT_DEFAULT
ACTOR = factories.ACTOR_DEFAULT


class CountingRejections:
    """Stands in for the metrics counter of refused reports."""

    def __init__(self) -> None:
        self.counts: Counter[ReportOutcome] = Counter()

    def rejected(self, outcome: ReportOutcome) -> None:
        self.counts[outcome] += 1


@pytest.fixture
def rejections() -> CountingRejections:
    return CountingRejections()


@pytest.fixture
def reports(db: Database, rejections: CountingRejections) -> WorkerReports:
    return WorkerReports(db, rejections, lease_max_seconds=3600)


def lease_of(claimed: ClaimedJob, token: int | None = None) -> LeaseRef:
    return LeaseRef(claimed.job_id, FencingToken(claimed.fencing_token if token is None else token))


# Each report a worker can make with a lease; all must be refused the same way when the lease is stale.
Report = Callable[[WorkerReports, LeaseRef], Coroutine[Any, Any, object]]
REPORTS: dict[str, Report] = {
    "complete": lambda r, lease: r.complete(WORKER_ID, Completion(lease.job_id, lease.fencing_token, b"late")),
    "fail": lambda r, lease: r.fail(WORKER_ID, lease, JobError(ErrorCategory.RETRYABLE, "boom")),
    "release": lambda r, lease: r.release(WORKER_ID, lease, started=False, reason="shutdown"),
}


async def _stale_token(db: Database) -> LeaseRef:
    first = await factories.insert_and_claim(db)
    await factories.reclaim(db, first.job_id)
    return lease_of(first)


async def _another_jobs_token(db: Database) -> LeaseRef:
    mine = await factories.insert_and_claim(db)
    other = await factories.insert_and_claim(db, kind="sleep")
    other = await factories.reclaim(db, other.job_id, kinds=["sleep"])
    return lease_of(mine, other.fencing_token)


async def _finished_job(db: Database) -> LeaseRef:
    claimed = await factories.insert_and_claim(db)
    await factories.set_state(db, claimed.job_id, JobState.SUCCEEDED)
    return lease_of(claimed)


async def _cancelled_job(db: Database) -> LeaseRef:
    """Cancelled while running; the worker never confirmed, so the expired lease ended it CANCELLED."""
    claimed = await factories.insert_and_claim(db)
    await JobLifecycle(db).cancel(TENANT, ACTOR, claimed.job_id, "not needed")
    await factories.expire_lease(db, claimed.job_id)
    await factories.rescue_expired(db)
    return lease_of(claimed)


async def _superseded_job(db: Database) -> LeaseRef:
    """Running when a newer version of its resource was submitted."""
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=1))
    claimed = await factories.claim_one(db)
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=2))
    return lease_of(claimed)


SITUATIONS = {
    "stale token": (_stale_token, LeaseLost, ReportOutcome.LEASE_LOST),
    "another job's token": (_another_jobs_token, LeaseLost, ReportOutcome.LEASE_LOST),
    "finished job": (_finished_job, LeaseLost, ReportOutcome.LEASE_LOST),
    "cancelled job": (_cancelled_job, JobCancelled, ReportOutcome.JOB_CANCELLED),
    "superseded job": (_superseded_job, JobSuperseded, ReportOutcome.JOB_SUPERSEDED),
}


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("situation", SITUATIONS)
async def test_a_report_without_the_current_lease_is_refused_and_changes_nothing(
    db, sync_db, reports, rejections, situation, report
):
    arrange, error, outcome = SITUATIONS[situation]
    lease = await arrange(db)
    before = sync_db.snapshot()

    with pytest.raises(error) as raised:
        await REPORTS[report](reports, lease)

    assert type(raised.value) is error and isinstance(raised.value, FailedPrecondition)
    assert sync_db.snapshot() == before
    assert rejections.counts == Counter({outcome: 1})


async def test_a_stale_heartbeat_is_not_held_and_leaves_the_current_lease_alone(db, sync_db, reports, rejections):
    first = await factories.insert_and_claim(db)
    await factories.reclaim(db, first.job_id)
    before = sync_db.snapshot()

    (status,) = await reports.heartbeat([lease_of(first)], extend_by_seconds=600)

    assert (status.held, status.cancel_requested, status.superseded) == (False, False, False)
    assert status.lease_expires_at is None
    assert sync_db.snapshot() == before
    assert rejections.counts == Counter({ReportOutcome.LEASE_LOST: 1})


async def test_a_heartbeat_racing_its_own_completion_is_not_a_fenced_rejection(db, reports, rejections):
    claimed = await factories.insert_and_claim(db)
    await reports.complete_many(WORKER_ID, [Completion(claimed.job_id, claimed.fencing_token, b"done")])

    (status,) = await reports.heartbeat([lease_of(claimed)], extend_by_seconds=600)

    assert (status.held, status.ended_by_holder) == (False, True)
    assert rejections.counts == Counter()


async def test_a_heartbeat_extends_each_held_lease_in_the_batch(db, sync_db, reports):
    held = await factories.insert_and_claim(db, lease_seconds=5)
    stale = await factories.insert_and_claim(db, kind="sleep")
    await factories.reclaim(db, stale.job_id, kinds=["sleep"])
    stale_expiry_before = sync_db.job(stale.job_id)["lease_expires_at"]

    statuses = await reports.heartbeat([lease_of(held), lease_of(stale)], extend_by_seconds=600)

    assert [(s.job_id, s.held) for s in statuses] == [(held.job_id, True), (stale.job_id, False)]
    extended = sync_db.job(held.job_id)["lease_expires_at"]
    assert extended > held.lease_expires_at
    assert statuses[0].lease_expires_at == extended
    assert sync_db.job(stale.job_id)["lease_expires_at"] == stale_expiry_before


async def test_a_heartbeat_tells_the_holder_about_cancel_and_supersede(db, reports, rejections):
    cancel_requested = await factories.insert_and_claim(db)
    await factories.set_state(db, cancel_requested.job_id, JobState.RUNNING, cancel_requested=True)
    cancelled = await factories.insert_and_claim(db)
    await factories.set_state(db, cancelled.job_id, JobState.CANCELLED, cancel_requested=True)
    superseded = await factories.insert_and_claim(db)
    await factories.set_state(db, superseded.job_id, JobState.SUPERSEDED)

    statuses = await reports.heartbeat(
        [lease_of(cancel_requested), lease_of(cancelled), lease_of(superseded)], extend_by_seconds=60
    )

    assert [(s.held, s.cancel_requested, s.superseded) for s in statuses] == [
        (True, True, False),
        (False, True, False),
        (False, False, True),
    ]
    assert rejections.counts == Counter({ReportOutcome.JOB_CANCELLED: 1, ReportOutcome.JOB_SUPERSEDED: 1})
    assert [s.outcome for s in statuses] == [
        ReportOutcome.ACCEPTED,
        ReportOutcome.JOB_CANCELLED,
        ReportOutcome.JOB_SUPERSEDED,
    ], "the refusal a report under each lease would get, as the report batches answer it"


async def test_a_cancel_is_released_with_its_last_lines_and_recorded_as_no_failure(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    await factories.set_state(db, claimed.job_id, JobState.RUNNING, cancel_requested=True)
    line = LogLine(datetime.now(UTC), "WARNING", "durable_jobs.job", "stopping on request")

    (state,) = await reports.release_many(
        WORKER_ID, [ReleaseReport(lease_of(claimed), True, "cancelled on request", ((1, line),))]
    )

    assert state is JobState.CANCELLED
    row = sync_db.one("SELECT last_error_category, last_error_message FROM jobs WHERE job_id = %s", (claimed.job_id,))
    assert row == {"last_error_category": None, "last_error_message": None}, "a cancel is no failure"
    ended = sync_db.one("SELECT reason FROM job_events WHERE job_id = %s AND to_state = 'cancelled'", (claimed.job_id,))
    assert ended == {"reason": "cancelled"}, "the history says what ended it, as after a failure report"
    kept = sync_db.one("SELECT sequence, message FROM job_logs WHERE job_id = %s", (claimed.job_id,))
    assert kept == {"sequence": 1, "message": "stopping on request"}
    (again,) = await reports.release_many(
        WORKER_ID, [ReleaseReport(lease_of(claimed), True, "cancelled on request", ((2, line),))]
    )
    assert again is ReportOutcome.JOB_CANCELLED, "lines under a lease no longer held are refused with it"
    assert sync_db.one("SELECT count(*) AS n FROM job_logs WHERE job_id = %s", (claimed.job_id,)) == {"n": 1}


async def test_a_heartbeat_outside_the_lease_bounds_is_invalid(db, reports):
    claimed = await factories.insert_and_claim(db)

    for seconds in (0.5, 3601):
        with pytest.raises(InvalidArgument) as raised:
            await reports.heartbeat([lease_of(claimed)], extend_by_seconds=seconds)
        assert raised.value.violations[0].field == "extend_by"


async def test_a_result_is_written_once_and_a_second_completion_is_refused(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)

    assert await reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"first")) is (
        JobState.SUCCEEDED
    )
    before = sync_db.snapshot()
    with pytest.raises(LeaseLost):
        await reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"second"))

    assert sync_db.snapshot() == before
    result = sync_db.one("SELECT payload, attempt, fencing_token FROM job_results")
    assert (bytes(result["payload"]), result["attempt"], result["fencing_token"]) == (b"first", 1, 1)


async def test_racing_completions_store_only_the_current_holders_result(db, sync_db, reports):
    pairs = []
    for _ in range(5):
        old = await factories.insert_and_claim(db)
        pairs.append((old, await factories.reclaim(db, old.job_id)))

    outcomes = await asyncio.gather(
        *(
            reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, which))
            for old, new in pairs
            for claimed, which in ((old, b"old"), (new, b"new"))
        ),
        return_exceptions=True,
    )

    assert [type(o) for o in outcomes] == [LeaseLost, JobState] * len(pairs)
    results = sync_db.rows("SELECT job_id::text, payload, attempt, fencing_token FROM job_results")
    assert sorted((r["job_id"], bytes(r["payload"]), r["attempt"], r["fencing_token"]) for r in results) == sorted(
        (new.job_id, b"new", 2, 2) for _, new in pairs
    )


async def test_racing_completions_with_the_same_token_store_one_result(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)

    outcomes = await asyncio.gather(
        *(reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"%d" % n)) for n in range(6)),
        return_exceptions=True,
    )

    assert sorted(type(o).__name__ for o in outcomes) == ["JobState"] + ["LeaseLost"] * 5
    winner = outcomes.index(JobState.SUCCEEDED)
    result = sync_db.one("SELECT payload FROM job_results")
    assert bytes(result["payload"]) == b"%d" % winner


async def test_complete_jobs_answers_per_item(db, sync_db, reports, rejections):
    accepted = await factories.insert_and_claim(db)
    stale = await factories.insert_and_claim(db)
    await factories.reclaim(db, stale.job_id)
    cancelled = await factories.insert_and_claim(db)
    await factories.set_state(db, cancelled.job_id, JobState.CANCELLED)
    superseded = await factories.insert_and_claim(db)
    await factories.set_state(db, superseded.job_id, JobState.SUPERSEDED)
    cancel_requested = await factories.insert_and_claim(db)
    await factories.set_state(db, cancel_requested.job_id, JobState.RUNNING, cancel_requested=True)
    batch = [accepted, stale, cancelled, superseded, cancel_requested]
    untouched_before = {c.job_id: sync_db.job(c.job_id) for c in (stale, cancelled, superseded)}

    outcomes = await reports.complete_many(WORKER_ID, [Completion(c.job_id, c.fencing_token, b"result") for c in batch])

    assert outcomes == [
        ReportOutcome.ACCEPTED,
        ReportOutcome.LEASE_LOST,
        ReportOutcome.JOB_CANCELLED,
        ReportOutcome.JOB_SUPERSEDED,
        ReportOutcome.JOB_CANCELLED,
    ]
    assert {c.job_id: sync_db.job(c.job_id) for c in (stale, cancelled, superseded)} == untouched_before
    assert sync_db.job(accepted.job_id)["state"] == "succeeded"
    assert sync_db.job(cancel_requested.job_id)["state"] == "cancelled"
    assert [r["job_id"] for r in sync_db.rows("SELECT job_id::text FROM job_results")] == [accepted.job_id]
    assert rejections.counts == Counter(
        {ReportOutcome.LEASE_LOST: 1, ReportOutcome.JOB_CANCELLED: 2, ReportOutcome.JOB_SUPERSEDED: 1}
    )


async def test_a_completion_after_a_cancel_request_cancels_and_discards_the_result(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    await factories.set_state(db, claimed.job_id, JobState.RUNNING, cancel_requested=True)

    with pytest.raises(JobCancelled):
        await reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"late"))

    row = sync_db.job(claimed.job_id)
    assert (row["state"], row["lease_expires_at"]) == ("cancelled", None)
    assert row["finished_at"] is not None
    assert sync_db.rows("SELECT * FROM job_results") == []


async def test_complete_jobs_refuses_a_batch_naming_a_job_twice(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    before = sync_db.snapshot()

    with pytest.raises(InvalidArgument):
        await reports.complete_many(WORKER_ID, [Completion(claimed.job_id, claimed.fencing_token, b"a")] * 2)

    assert sync_db.snapshot() == before


def _db_now(sync_db) -> datetime:
    return sync_db.one("SELECT clock_timestamp() AS now")["now"]


@pytest.mark.parametrize(
    ("category", "max_attempts", "expected"),
    [
        (ErrorCategory.RETRYABLE, 3, JobState.RETRY_WAIT),
        (ErrorCategory.PERMANENT, 3, JobState.FAILED),
        (ErrorCategory.OUTCOME_UNKNOWN, 3, JobState.OUTCOME_UNKNOWN),
        (ErrorCategory.RETRYABLE, 1, JobState.FAILED),
    ],
)
async def test_fail_job_decides_the_next_state_by_category_and_attempts(
    db, sync_db, reports, category, max_attempts, expected
):
    claimed = await factories.insert_and_claim(db, max_attempts=max_attempts, backoff_base_seconds=60)
    before_report = _db_now(sync_db)

    outcome = await reports.fail(WORKER_ID, lease_of(claimed), JobError(category, "it broke\x00 here"))

    row = sync_db.job(claimed.job_id)
    assert outcome.state is expected and row["state"] == expected.value
    assert (row["last_error_category"], row["last_error_message"]) == (category.value, "it broke here")
    assert (row["attempts"], row["fencing_token"], row["lease_expires_at"]) == (1, 1, None)
    if expected is JobState.RETRY_WAIT:
        assert outcome.next_attempt_at == row["run_after"]
        assert row["run_after"] > before_report
        assert row["finished_at"] is None
    else:
        assert outcome.next_attempt_at is None
    assert (row["finished_at"] is not None) == expected.is_terminal


@pytest.mark.parametrize(
    ("started", "max_attempts", "state", "attempts"),
    [
        (False, 1, "pending", 0),
        (True, 3, "pending", 1),
        (True, 1, "failed", 1),
    ],
)
async def test_release_job_refunds_an_unstarted_attempt(db, sync_db, reports, started, max_attempts, state, attempts):
    claimed = await factories.insert_and_claim(db, max_attempts=max_attempts)

    released = await reports.release(WORKER_ID, lease_of(claimed), started=started, reason="shutdown")

    row = sync_db.job(claimed.job_id)
    assert released.value == row["state"] == state
    assert (row["attempts"], row["fencing_token"], row["lease_owner"]) == (attempts, 1, None)
    if state == "pending":
        again = await factories.claim_one(db)
        assert (again.job_id, again.attempt, again.fencing_token) == (claimed.job_id, attempts + 1, 2)


@pytest.mark.parametrize(("confirmed", "state"), [(False, "outcome_unknown"), (True, "pending")])
async def test_an_attempt_that_recorded_a_receipt_counts_even_if_released_as_unstarted(
    db, sync_db, reports, confirmed, state
):
    claimed = await factories.insert_and_claim(db, max_attempts=3)
    async with db.transaction() as conn:
        assert await receipt_store.record_intent(conn, lease_of(claimed), "charge", b"ch_1")
        if confirmed:
            assert await receipt_store.confirm_receipt(conn, lease_of(claimed), "charge", b"ok")

    released = await reports.release(WORKER_ID, lease_of(claimed), started=False, reason="shutdown")

    row = sync_db.job(claimed.job_id)
    assert released.value == row["state"] == state
    assert row["attempts"] == 1, "the attempt that made an external call is not refunded"


async def test_a_report_with_a_malformed_lease_is_invalid(db, sync_db, reports):
    claimed = await factories.insert_and_claim(db)
    before = sync_db.snapshot()

    with pytest.raises(InvalidArgument) as raised:
        await reports.fail(
            WORKER_ID,
            LeaseRef(JobId(claimed.job_id.upper()), claimed.fencing_token),
            JobError(ErrorCategory.PERMANENT, "x"),
        )
    assert raised.value.violations[0].field == "lease[0].job_id"
    with pytest.raises(InvalidArgument) as raised:
        await reports.complete(WORKER_ID, Completion(claimed.job_id, FencingToken(0), b""))
    assert raised.value.violations[0].field == "completions[0].fencing_token"

    assert sync_db.snapshot() == before


@pytest.mark.parametrize("report", REPORTS)
async def test_a_report_racing_a_cancel_request_honours_the_cancel(db, database_url, sync_db, reports, report):
    claimed = await factories.insert_and_claim(db)
    with psycopg.connect(database_url) as canceller:
        canceller.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (claimed.job_id,))
        reporting = asyncio.create_task(REPORTS[report](reports, lease_of(claimed)))
        # The report's statement has started (its snapshot predates the cancel) and waits on the row lock.
        await wait_until(lambda: _waiting_on_a_lock(sync_db), what="the report to block on the row")
        canceller.commit()
        outcome = (await asyncio.gather(reporting, return_exceptions=True))[0]

    # CompleteJob refuses with JOB_CANCELLED; FailJob and ReleaseJob answer with the CANCELLED state.
    if report == "complete":
        assert isinstance(outcome, JobCancelled)
    else:
        assert getattr(outcome, "state", outcome) is JobState.CANCELLED
    assert sync_db.job(claimed.job_id)["state"] == "cancelled"
    assert sync_db.rows("SELECT * FROM job_results") == []


def _waiting_on_a_lock(sync_db) -> bool:
    return bool(
        sync_db.rows(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND wait_event_type = 'Lock'",
            (POOL_APPLICATION_NAME,),
        )
    )


async def test_a_result_over_the_maximum_fails_its_attempt_and_spares_the_rest_of_its_batch(
    db: Database, rejections: CountingRejections
) -> None:
    """The API is the last word on the result limit, whatever a worker's setting says: the oversized
    result is not stored, its attempt fails PERMANENT naming the limit, and its batch's others are stored."""
    reports = WorkerReports(db, rejections, lease_max_seconds=3600, max_result_bytes=1000)
    await factories.insert_jobs(db, 2)
    large, small = await factories.claim(db, limit=2)

    outcomes = await reports.complete_many(
        WORKER_ID,
        [
            Completion(large.job_id, large.fencing_token, b"x" * 1001),
            Completion(small.job_id, small.fencing_token, b"ok"),
        ],
    )

    assert outcomes == [ReportOutcome.RESULT_TOO_LARGE, ReportOutcome.ACCEPTED]
    async with db.transaction() as conn:
        job = await job_store.get_job(conn, TENANT, large.job_id)
        assert await job_store.get_result(conn, TENANT, large.job_id) == (JobState.FAILED, None)
    assert job is not None and job.last_error is not None
    assert job.last_error.category is ErrorCategory.PERMANENT
    assert "1001 bytes, over the maximum of 1000 bytes (JOBS_MAX_RESULT_BYTES)" in job.last_error.message
    assert not rejections.counts, "an oversized result is no fencing refusal"
    third = await factories.insert_job(db)
    claimed = await factories.claim_one(db)
    assert claimed.job_id == third.job_id
    with pytest.raises(FailedPrecondition) as refused:
        await reports.complete(WORKER_ID, Completion(claimed.job_id, claimed.fencing_token, b"y" * 2000))
    assert refused.value.reason == "RESULT_TOO_LARGE"
