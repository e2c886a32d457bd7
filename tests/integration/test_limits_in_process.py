"""The limits' own logic, in process: the token bucket, the waiting-jobs cap and the caller's deadline
carried into every transaction as its statement timeout."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from api_service.usecases.admission import SubmissionAdmission, TenantLimits, TokenBucket
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import DeadlineExceeded, ResourceExhausted
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database, call_deadline
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)

ACME, GLOBEX = TenantId("acme"), TenantId("globex")


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_refills_at_its_rate_and_says_how_long_to_wait() -> None:
    bucket = TokenBucket(rate_per_second=10, burst=5, now=0.0)
    assert [bucket.take(1, 0.0) for _ in range(5)] == [0.0] * 5
    assert bucket.take(1, 0.0) == pytest.approx(0.1)
    assert bucket.take(2, 0.15) == pytest.approx(0.05)  # 1.5 tokens after 0.15 s
    assert bucket.take(2, 0.2) == 0.0


def test_a_request_larger_than_the_burst_waits_for_a_full_bucket_then_leaves_a_debt() -> None:
    bucket = TokenBucket(rate_per_second=10, burst=5, now=0.0)
    assert bucket.take(8, 0.0) == 0.0
    assert bucket.take(1, 0.0) == pytest.approx(0.4)  # -3 tokens: 0.4 s until one is back


async def test_the_rate_is_per_tenant(db: Database) -> None:
    clock = ManualClock()
    admission = SubmissionAdmission(
        db, TenantLimits(submit_rate_per_second=1, submit_burst=2, max_queued_jobs=0), clock
    )
    await admission.admit(ACME, 2)
    with pytest.raises(ResourceExhausted) as raised:
        await admission.admit(ACME, 1)
    assert raised.value.retry_after_seconds == pytest.approx(1.0)
    await admission.admit(GLOBEX, 2)
    clock.now += 1.0
    await admission.admit(ACME, 1)


async def test_the_waiting_jobs_cap_counts_the_database_and_what_was_admitted_since(db: Database) -> None:
    clock = ManualClock()
    admission = SubmissionAdmission(
        db, TenantLimits(submit_rate_per_second=0, max_queued_jobs=5, recount_seconds=1.0), clock
    )
    await factories.insert_jobs(db, 3, tenant=ACME)
    finished = await factories.insert_job(db, tenant=ACME)
    await factories.set_state(db, finished.job_id, JobState.SUCCEEDED)

    await admission.admit(ACME, 2)  # 3 waiting + 2 = the cap
    with pytest.raises(ResourceExhausted):
        await admission.admit(ACME, 1)
    await admission.admit(GLOBEX, 5)

    claimed = await factories.claim(db, limit=3)
    assert len(claimed) == 3
    clock.now += 1.0  # recounted: nothing waits any more (the 2 admitted were never inserted)
    await admission.admit(ACME, 5)


async def test_an_expired_deadline_refuses_before_taking_a_connection(db: Database) -> None:
    with call_deadline(-1.0), pytest.raises(DeadlineExceeded):
        async with db.transaction():
            pass


async def test_the_deadline_becomes_the_statement_timeout(db: Database) -> None:
    started = time.monotonic()
    with call_deadline(0.3), pytest.raises(DeadlineExceeded):
        async with db.transaction() as conn:
            await conn.execute("SELECT pg_sleep(5)")
    assert time.monotonic() - started < 2
    async with db.transaction() as conn:  # the setting ended with its transaction: the pool's own bound now
        cur = await conn.execute("SELECT current_setting('statement_timeout')::interval > '10 s' AS pools_own")
        assert (await cur.fetchone())["pools_own"]


def _backends_waiting_on_a_lock(database_url: str) -> int:
    with psycopg.connect(database_url) as probe:
        return probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]


async def test_one_callers_deadline_bounds_its_own_group_commit_and_no_later_one(db: Database, database_url) -> None:
    """The group committer's task outlives the caller that started it and runs later callers' work: a
    flush is bounded by the deadlines of the submissions it carries, so the first caller's deadline ends
    its own stuck flush (nothing written) and bounds no later one."""
    submissions = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    await submissions.submit(ACME, "tenant:acme", factories.new_job(resource_key="doc", resource_version=1))
    with psycopg.connect(database_url) as locker:
        locker.execute("SELECT 1 FROM resource_heads FOR UPDATE")
        with call_deadline(0.3):
            first = asyncio.create_task(
                submissions.submit(ACME, "tenant:acme", factories.new_job(resource_key="doc", resource_version=2))
            )
        await wait_until(lambda: _backends_waiting_on_a_lock(database_url) == 1, what="the first submission to wait")
        later = asyncio.create_task(submissions.submit(ACME, "tenant:acme", factories.new_job()))
        await asyncio.sleep(0.5)  # past the first caller's deadline
        locker.rollback()
    assert (await later).created
    with pytest.raises(DeadlineExceeded):
        await first
    with psycopg.connect(database_url) as probe:
        assert probe.execute("SELECT count(*) FROM jobs WHERE resource_version = 2").fetchone()[0] == 0
