"""What follows a failed attempt, at any attempt number, and sweeps that one bad row cannot stop.

Attempt numbers have no upper bound (every RetryJob grants a fresh budget), so the tests put a job on a
high attempt directly in its row instead of retrying it a thousand times through the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import ClaimedJob, ErrorCategory, JobError, JobState, LeaseRef
from shared.handlers.api import BACKOFF_CAP_SECONDS_MAX, HandlerRegistry
from shared.handlers.builtin import echo
from shared.storage import queries
from shared.storage.database import Database
from tests import factories
from tests.conditions import wait_until
from tests.db_fixtures import SyncProbe
from worker_service.background_loops import REJECTED_PASS_OVER_SECONDS, RESCUE_BATCH_LIMIT, rescue_leases
from worker_service.metrics import WorkerMetrics

pytestmark = pytest.mark.timeout(60)

WORKER_ID = "worker-1"
# Far past attempt 1025, from which 2^(attempt-1) no longer fits a double.
HIGH_ATTEMPT = 5000
BACKOFF_BASE = 1.0
BACKOFF_CAP = 300.0
TENANT_A = TenantId("tenant-a")
TENANT_B = TenantId("tenant-b")
POISON_TENANT = TenantId("tenant-poison")
SWEEP_INTERVAL_SECONDS = 0.01
SWEPT_WITHIN_SECONDS = 20.0


class _NoRejections:
    def rejected(self, outcome: object) -> None:
        pass


@pytest.fixture
def reports(db: Database) -> WorkerReports:
    return WorkerReports(db, _NoRejections(), lease_max_seconds=3600)


def lease_of(claimed: ClaimedJob) -> LeaseRef:
    return LeaseRef(claimed.job_id, FencingToken(claimed.fencing_token))


async def running_on_attempt(
    db: Database, sync_db: SyncProbe, attempt: int, *, tenant: TenantId = TENANT_A
) -> ClaimedJob:
    """A running job on its `attempt`-th attempt with attempts to spare, as many manual retries leave one."""
    claimed = await factories.insert_and_claim(
        db, tenant=tenant, backoff_base_seconds=BACKOFF_BASE, backoff_cap_seconds=BACKOFF_CAP
    )
    sync_db.execute(
        "UPDATE jobs SET attempts = %s, max_attempts = %s WHERE job_id = %s", (attempt, attempt + 2, claimed.job_id)
    )
    return claimed


def database_now(sync_db: SyncProbe):
    return sync_db.one("SELECT clock_timestamp() AS now")["now"]


def state_of(sync_db: SyncProbe, job_id: JobId) -> JobState:
    return JobState(sync_db.job(job_id)["state"])


@contextlib.asynccontextmanager
async def sweeping(
    db: Database,
    metrics: WorkerMetrics,
    *,
    batch_limit: int = RESCUE_BATCH_LIMIT,
    pass_over_seconds: float = REJECTED_PASS_OVER_SECONDS,
) -> AsyncIterator[None]:
    """The worker's sweep loop, running until the block ends."""
    task = asyncio.create_task(
        rescue_leases(db, metrics, SWEEP_INTERVAL_SECONDS, batch_limit=batch_limit, pass_over_seconds=pass_over_seconds)
    )
    try:
        yield
    finally:
        task.cancel()
        # Re-raises the loop's own error, had it died.
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_backoff_ceiling_doubles_up_to_the_cap_at_any_attempt(sync_db):
    attempts = [0, 1, 2, 3, 9, 10, 1024, 1025, HIGH_ATTEMPT, 2**31 - 1]
    rows = sync_db.rows(
        "SELECT a, jobs_retry_backoff_ceiling(a, 1, 300) AS ceiling FROM unnest(%s::integer[]) AS a", (attempts,)
    )

    assert [r["ceiling"] for r in rows] == [1, 1, 2, 4, 256, 300, 300, 300, 300, 300]
    edge = sync_db.one(
        "SELECT jobs_retry_backoff_ceiling(7, 0, 300) AS no_base, jobs_retry_backoff_ceiling(7, 1, 0) AS no_cap,"
        " jobs_retry_backoff_ceiling(2, 500, 300) AS base_above_cap,"
        " jobs_retry_backoff_ceiling(2000, 1e-300, 1e6) AS tiny_base"
    )
    assert edge == {"no_base": 0, "no_cap": 0, "base_above_cap": 300, "tiny_base": 1e6}


async def test_a_failure_past_attempt_1024_waits_at_most_the_cap(db, sync_db, reports):
    claimed = await running_on_attempt(db, sync_db, HIGH_ATTEMPT)
    before = database_now(sync_db)

    outcome = await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.RETRYABLE, "boom"))

    assert outcome.state is JobState.RETRY_WAIT
    assert before <= outcome.next_attempt_at <= database_now(sync_db) + timedelta(seconds=BACKOFF_CAP)


async def test_an_expired_lease_past_attempt_1024_is_rescued_with_at_most_the_cap(db, sync_db):
    claimed = await running_on_attempt(db, sync_db, HIGH_ATTEMPT)
    await factories.expire_lease(db, claimed.job_id)
    before = database_now(sync_db)

    rescued = await factories.rescue_expired(db)

    assert [(t.job_id, t.state) for t in rescued] == [(claimed.job_id, JobState.RETRY_WAIT)]
    run_after = sync_db.job(claimed.job_id)["run_after"]
    assert before <= run_after <= database_now(sync_db) + timedelta(seconds=BACKOFF_CAP)


async def test_one_tenants_job_past_attempt_1024_stops_neither_anothers_rescue_nor_the_deadline_sweep(db, sync_db):
    stuck = await running_on_attempt(db, sync_db, HIGH_ATTEMPT, tenant=TENANT_A)
    crashed = await factories.insert_and_claim(db, tenant=TENANT_B)
    overdue = await factories.insert_job(db, tenant=TENANT_B, kind="sleep")
    # The high attempt's lease ran out first, so it leads every batch.
    sync_db.execute(
        "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1 minute' WHERE job_id = %s", (stuck.job_id,)
    )
    await factories.expire_lease(db, crashed.job_id)
    sync_db.execute(
        "UPDATE jobs SET deadline = clock_timestamp() - interval '1 second' WHERE job_id = %s", (overdue.job_id,)
    )

    async with sweeping(db, WorkerMetrics(10)):
        await wait_until(
            lambda: (
                (state_of(sync_db, crashed.job_id), state_of(sync_db, overdue.job_id))
                == (JobState.RETRY_WAIT, JobState.FAILED)
            ),
            within_seconds=SWEPT_WITHIN_SECONDS,
            what="the other tenant's expired lease rescued and its overdue job failed",
        )

    assert state_of(sync_db, stuck.job_id) is JobState.RETRY_WAIT


def _refuse_the_poison_tenants_transitions(sync_db: SyncProbe) -> None:
    """A row whose every transition the database refuses, whatever the cause (here a trigger's error)."""
    sync_db.execute(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.tenant = 'tenant-poison' THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END IF;"
        " RETURN NEW; END $$"
    )
    sync_db.execute(
        "CREATE TRIGGER refuse_poison BEFORE UPDATE OF state ON jobs FOR EACH ROW EXECUTE FUNCTION refuse_poison()"
    )


def _rejected(metrics: WorkerMetrics, sweep: str) -> float:
    return metrics.registry.get_sample_value("jobs_sweep_rejected_total", {"sweep": sweep}) or 0.0


async def test_rows_the_database_refuses_are_passed_over_and_every_other_row_is_swept(db, sync_db):
    # More refused rows than one batch holds, and their leases ran out first: without passing them over,
    # they would fill every batch.
    batch_limit = 2
    poisoned = [await factories.insert_and_claim(db, tenant=POISON_TENANT) for _ in range(batch_limit + 1)]
    crashed = [await factories.insert_and_claim(db, tenant=TENANT_B) for _ in range(batch_limit)]
    poisoned_overdue = await factories.insert_job(db, tenant=POISON_TENANT, kind="sleep")
    overdue = await factories.insert_job(db, tenant=TENANT_B, kind="sleep")
    for age, claimed in enumerate(reversed(poisoned + crashed), start=1):
        sync_db.execute(
            "UPDATE jobs SET lease_expires_at = clock_timestamp() - make_interval(mins => %s) WHERE job_id = %s",
            (age, claimed.job_id),
        )
    sync_db.execute(
        "UPDATE jobs SET deadline = clock_timestamp() - interval '1 second' WHERE job_id = ANY (%s::uuid[])",
        ([poisoned_overdue.job_id, overdue.job_id],),
    )
    _refuse_the_poison_tenants_transitions(sync_db)
    metrics = WorkerMetrics(10)

    async with sweeping(db, metrics, batch_limit=batch_limit, pass_over_seconds=3600):
        await wait_until(
            lambda: (
                [state_of(sync_db, c.job_id) for c in crashed] == [JobState.RETRY_WAIT] * len(crashed)
                and state_of(sync_db, overdue.job_id) is JobState.FAILED
            ),
            within_seconds=SWEPT_WITHIN_SECONDS,
            what="every row the database accepts swept",
        )

    assert [state_of(sync_db, c.job_id) for c in poisoned] == [JobState.RUNNING] * len(poisoned)
    assert state_of(sync_db, poisoned_overdue.job_id) is JobState.PENDING
    # Each refused row is counted once: passed over, it is not tried again within the hour.
    assert (_rejected(metrics, "lease"), _rejected(metrics, "deadline")) == (len(poisoned), 1)

    # Once the cause is gone, a row passed over is swept like any other when its time is up.
    sync_db.execute("DROP TRIGGER refuse_poison ON jobs")
    fresh = WorkerMetrics(10)
    async with sweeping(db, fresh, batch_limit=batch_limit, pass_over_seconds=0):
        await wait_until(
            lambda: (
                {state_of(sync_db, c.job_id) for c in poisoned} == {JobState.RETRY_WAIT}
                and state_of(sync_db, poisoned_overdue.job_id) is JobState.FAILED
            ),
            within_seconds=SWEPT_WITHIN_SECONDS,
            what="the rows once refused swept",
        )
    # Nothing refused this time, and the series say so: they exist at 0 from the sweeps' start, so an
    # alert on their increase would see the first rejection.
    for sweep in ("lease", "deadline"):
        assert fresh.registry.get_sample_value("jobs_sweep_rejected_total", {"sweep": sweep}) == 0


async def test_manual_retries_are_not_capped_and_the_backoff_stays_bounded(db, sync_db, reports):
    claimed = await running_on_attempt(db, sync_db, HIGH_ATTEMPT)
    await reports.fail(WORKER_ID, lease_of(claimed), JobError(ErrorCategory.PERMANENT, "no"))

    reopened = await JobLifecycle(db).retry(
        factories.TENANT_DEFAULT, factories.ACTOR_DEFAULT, claimed.job_id, "again", accept_duplicate_risk=False
    )
    again = await factories.claim_one(db)
    before = database_now(sync_db)
    outcome = await reports.fail(WORKER_ID, lease_of(again), JobError(ErrorCategory.RETRYABLE, "boom"))

    assert (reopened.state, reopened.max_attempts) == (JobState.PENDING, HIGH_ATTEMPT + factories.MAX_ATTEMPTS_DEFAULT)
    assert (again.job_id, again.attempt) == (claimed.job_id, HIGH_ATTEMPT + 1)
    assert outcome.state is JobState.RETRY_WAIT
    assert before <= outcome.next_attempt_at <= database_now(sync_db) + timedelta(seconds=BACKOFF_CAP)


def test_every_statement_that_ends_an_attempt_takes_the_one_policy():
    for statement in (queries.JOB_FAIL, queries.JOB_RESCUE_EXPIRED, queries.JOB_RELEASE):
        assert "jobs_next_state_after_failure(" in statement
        assert "power(" not in statement
    for statement in (queries.JOB_FAIL, queries.JOB_RESCUE_EXPIRED):
        assert "jobs_retry_backoff(" in statement


@pytest.mark.parametrize(
    ("base", "cap"),
    [
        (-1.0, 300.0),
        (math.inf, 300.0),
        (math.nan, 300.0),
        (1.0, -1.0),
        (1.0, math.nan),
        (1.0, math.inf),
        (1.0, BACKOFF_CAP_SECONDS_MAX * 2),
    ],
)
def test_a_kind_cannot_register_a_backoff_no_retry_time_can_hold(base, cap):
    with pytest.raises(ValueError, match="backoff"):
        HandlerRegistry().register("odd", backoff_base_seconds=base, backoff_cap_seconds=cap)(echo)
