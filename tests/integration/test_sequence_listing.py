"""ListJobs(sequence_key=…) over a real database: the jobs still holding one tenant's sequence, its head
first and then in the order they will run, a page at a time through the service's page tokens; another
tenant's sequence with the same key is never among them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api_service.convert import decode_page_token, encode_page_token
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.lifecycle import JobLifecycle
from shared.domain.errors import InvalidArgument
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Completion, Job, JobState, ListFilter
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import lease_store, queries
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(60)
A = factories.TENANT_DEFAULT
B = TenantId("tenant-b")


async def _submit(db: Database, tenant: TenantId = A, **fields) -> Job:
    service = await factories.submission_service(db)
    return (await service.submit(tenant, f"tenant:{tenant}", factories.new_job(**fields))).job


async def _complete_head(db: Database) -> None:
    head = await factories.claim_one(db)
    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(head.job_id, head.fencing_token, b"")]
        )


async def _listed(db: Database, tenant: TenantId, key: str, *, page_size: int = 0, **filters) -> list[JobId]:
    """Every page of the listing, each page's token passed on as a caller passes it (encoded, decoded)."""
    found: list[JobId] = []
    token = ""
    while True:
        page = await JobQueries(db).list_jobs(
            tenant, ListFilter(sequence_key=key, **filters), decode_page_token(token), page_size
        )
        found += [j.job_id for j in page.jobs]
        token = encode_page_token(page.next_cursor)
        if not token:
            return found


async def test_the_listing_is_the_sequences_queue_head_first_without_its_ended_jobs(db):
    jobs = [await _submit(db, sequence_key="doc") for _ in range(4)]
    await _submit(db, sequence_key="other-doc")
    await _submit(db)
    assert await _listed(db, A, "doc") == [j.job_id for j in jobs]

    await _complete_head(db)
    await JobLifecycle(db).cancel(A, "tenant:a", jobs[2].job_id, "")
    assert await _listed(db, A, "doc") == [jobs[1].job_id, jobs[3].job_id]


async def test_a_retried_job_is_listed_behind_the_running_head_before_the_jobs_accepted_after_it(db, sync_db):
    first, second, third = [await _submit(db, sequence_key="doc") for _ in range(3)]
    await JobLifecycle(db).cancel(A, "tenant:a", first.job_id, "")
    assert (await factories.claim_one(db)).job_id == second.job_id
    await JobLifecycle(db).retry(A, "tenant:a", first.job_id, "", accept_duplicate_risk=False)
    assert sync_db.job(first.job_id)["parked_on"] == ""

    assert await _listed(db, A, "doc") == [second.job_id, first.job_id, third.job_id]
    assert await _listed(db, A, "doc", page_size=1) == [second.job_id, first.job_id, third.job_id]


async def test_another_tenants_sequence_with_the_same_key_is_not_listed(db):
    ours = [await _submit(db, A, sequence_key="doc") for _ in range(2)]
    theirs = [await _submit(db, B, sequence_key="doc") for _ in range(3)]
    assert await _listed(db, A, "doc") == [j.job_id for j in ours]
    assert await _listed(db, B, "doc", page_size=2) == [j.job_id for j in theirs]
    assert await _listed(db, TenantId("tenant-c"), "doc") == []


async def test_pages_walk_the_sequence_in_order_while_its_head_moves_on(db):
    jobs = [await _submit(db, sequence_key="doc", labels={"n": str(i)}) for i in range(7)]
    assert await _listed(db, A, "doc", page_size=2) == [j.job_id for j in jobs]

    queries_ = JobQueries(db)
    first = await queries_.list_jobs(A, ListFilter(sequence_key="doc"), None, 3)
    assert [j.job_id for j in first.jobs] == [j.job_id for j in jobs[:3]]
    # The head ends between two pages: its next job is released, and the next page goes on after the third.
    await _complete_head(db)
    cursor = decode_page_token(encode_page_token(first.next_cursor))
    rest = await queries_.list_jobs(A, ListFilter(sequence_key="doc"), cursor, 10)
    assert [j.job_id for j in rest.jobs] == [j.job_id for j in jobs[3:]] and rest.next_cursor is None

    # The other filters apply within the sequence.
    assert await _listed(db, A, "doc", labels={"n": "5"}) == [jobs[5].job_id]
    assert await _listed(db, A, "doc", states=(JobState.RUNNING,)) == []
    assert await _listed(db, A, "doc", states=(JobState.SUCCEEDED,)) == []


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("k" * (SubmissionLimits().max_job_key_chars + 1), "must be at most"),
        ("doc\x00", "must not contain NUL"),
    ],
)
async def test_a_malformed_sequence_key_is_invalid_argument(db, key, why):
    with pytest.raises(InvalidArgument) as refused:
        await JobQueries(db).list_jobs(A, ListFilter(sequence_key=key), None, 0)
    assert [(v.field, v.description.startswith(why)) for v in refused.value.violations] == [("sequence_key", True)]


async def test_a_page_token_from_another_listing_is_refused(db):
    for _ in range(3):
        await _submit(db, sequence_key="doc")
    plain = await JobQueries(db).list_jobs(A, ListFilter(), None, 1)
    in_sequence = await JobQueries(db).list_jobs(A, ListFilter(sequence_key="doc"), None, 1)
    mixed = ((ListFilter(sequence_key="doc"), plain.next_cursor), (ListFilter(), in_sequence.next_cursor))
    for filters, cursor in mixed:
        with pytest.raises(InvalidArgument) as refused:
            await JobQueries(db).list_jobs(A, filters, cursor, 1)
        assert [v.field for v in refused.value.violations] == ["page_token"]


def test_the_listing_reads_the_sequences_index(sync_db):
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, sequence_key, sequence_position,"
        "                  parked_on)"
        " SELECT 't' || (i % 50), 'echo', 'pending', '', 3, 3, 'k' || (i % 500), i, CASE WHEN i > 500 THEN '' END"
        " FROM generate_series(1, 5000) AS i"
    )
    sync_db.execute("ANALYZE jobs")
    params: dict[str, Any] = {
        "tenant": "t0",
        "sequence_key": "k0",
        "states": [],
        "kind": None,
        "resource_key": None,
        "labels": "{}",
        "after_waiting": None,
        "after_position": None,
        "limit": 51,
    }
    plan = json.dumps(sync_db.rows("EXPLAIN (FORMAT JSON) " + queries.JOB_LIST_SEQUENCE, params))
    assert "jobs_sequence_live_idx" in plan, plan
