"""Dependencies settling under concurrency: the last of several dependencies to succeed always
unblocks the dependent, even when they succeed in concurrent transactions."""

from __future__ import annotations

import threading

import psycopg
import pytest

from api_service.usecases.submission import SubmissionService
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import queries
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)


def _complete(conn: psycopg.Connection, claimed) -> None:
    conn.execute(
        queries.JOB_COMPLETE_BATCH,
        {"job_ids": [claimed.job_id], "fencing_tokens": [claimed.fencing_token], "results": [b"r"], "worker_id": "w"},
    )


def _waits_on_a_lock(sync_db, pid: int) -> bool:
    row = sync_db.one("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", (pid,))
    return row["n"] == 1


async def test_two_dependencies_succeeding_in_concurrent_transactions_unblock_the_dependent(db, database_url, sync_db):
    first = await factories.insert_and_claim(db)
    second = await factories.insert_and_claim(db)
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())
    dependent = (
        await service.submit(
            TenantId(factories.TENANT_DEFAULT), "tenant:t", factories.new_job(depends_on=(first.job_id, second.job_id))
        )
    ).job
    assert dependent.state is JobState.BLOCKED

    with psycopg.connect(database_url) as one, psycopg.connect(database_url) as other:
        _complete(one, first)  # not committed yet
        other_pid = other.info.backend_pid
        finished = threading.Event()

        def complete_second() -> None:
            _complete(other, second)
            other.commit()
            finished.set()

        racer = threading.Thread(target=complete_second)
        racer.start()
        # With dependents locked first, the second completion waits for the first to commit.
        await wait_until(
            lambda: finished.is_set() or _waits_on_a_lock(sync_db, other_pid), what="the second completion"
        )
        one.commit()
        racer.join(10)

    assert sync_db.job(dependent.job_id)["state"] == "pending"
