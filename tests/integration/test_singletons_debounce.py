"""Singletons and debounce over a real database: racing submissions of one key agree on one job."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import FailedPrecondition, InvalidArgument
from shared.domain.ids import TenantId
from shared.domain.jobs import Completion, Debounce, ErrorCategory, JobError, LeaseRef, SubmitOutcome
from shared.domain.schedules import template_from_job
from shared.storage import lease_store
from tests import factories

pytestmark = pytest.mark.timeout(60)
A = factories.TENANT_DEFAULT
B = TenantId("tenant-b")


async def _submit(service: SubmissionService, tenant: TenantId = A, **fields) -> SubmitOutcome:
    return await service.submit(tenant, f"tenant:{tenant}", factories.new_job(**fields))


async def test_racing_submissions_of_a_singleton_key_answer_one_job(db, database_url):
    services = [await factories.submission_service(db) for _ in range(4)]
    outcomes = await asyncio.gather(
        *(_submit(services[i % 4], singleton_key="nightly", payload=str(i).encode()) for i in range(24))
    )
    assert len({o.job.job_id for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1
    assert outcomes[0].job.singleton_key == "nightly"


async def test_a_singleton_answers_its_running_job_and_a_new_one_once_it_ended(db):
    service = await factories.submission_service(db)
    first = (await _submit(service, singleton_key="k")).job
    claimed = await factories.claim_one(db)
    again = await _submit(service, singleton_key="k", payload=b"other")
    assert (again.job.job_id, again.created) == (first.job_id, False)
    assert (await _submit(service, B, singleton_key="k")).created, "another tenant's key is its own"

    async with db.transaction() as conn:
        await lease_store.complete_batch(
            conn, worker_id="w", completions=[Completion(claimed.job_id, claimed.fencing_token, b"r")]
        )
    after = await _submit(service, singleton_key="k")
    assert after.created and after.job.job_id != first.job_id


async def test_a_failed_singleton_is_not_reopened_while_another_with_its_key_is_active(db):
    service = await factories.submission_service(db)
    first = (await _submit(service, singleton_key="k")).job
    claimed = await factories.claim_one(db)
    async with db.transaction() as conn:
        await lease_store.fail_attempt(
            conn,
            worker_id="w",
            lease=LeaseRef(claimed.job_id, claimed.fencing_token),
            error=JobError(ErrorCategory.PERMANENT, "no"),
        )
    second = await _submit(service, singleton_key="k")
    assert second.created

    with pytest.raises(FailedPrecondition) as refused:
        await JobLifecycle(db).retry(A, "tenant:a", first.job_id, "", accept_duplicate_risk=False)
    assert refused.value.reason == "SINGLETON_ACTIVE"


async def test_a_burst_of_debounced_submissions_collapses_into_one_job_with_the_latest_payload(db, sync_db):
    service = await factories.submission_service(db)
    debounce = Debounce("doc-7", quiet_seconds=30, max_wait_seconds=60)
    outcomes = [await _submit(service, debounce=debounce, payload=f"edit {i}".encode()) for i in range(5)]
    job_id = outcomes[0].job.job_id
    assert [o.job.job_id for o in outcomes] == [job_id] * 5
    assert [o.created for o in outcomes] == [True, False, False, False, False]
    row = sync_db.job(job_id)
    assert bytes(row["payload"]) == b"edit 4"
    # Quiet for 30 s after the latest, and never later than 60 s after the first.
    assert row["created_at"] + timedelta(seconds=30) < row["run_after"] <= row["debounce_max_at"]
    assert row["debounce_max_at"] <= row["created_at"] + timedelta(seconds=60, milliseconds=100)
    assert await factories.claim(db, limit=10) == [], "the key has not been quiet long enough"


async def test_racing_debounced_submissions_collapse_into_one_job(db):
    services = [await factories.submission_service(db) for _ in range(4)]
    debounce = Debounce("burst", quiet_seconds=5, max_wait_seconds=10)
    outcomes = await asyncio.gather(
        *(_submit(services[i % 4], debounce=debounce, payload=str(i).encode()) for i in range(24))
    )
    assert len({o.job.job_id for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1


async def test_a_debounced_job_once_claimed_takes_no_more_submissions(db, sync_db):
    service = await factories.submission_service(db)
    debounce = Debounce("doc", quiet_seconds=0.001, max_wait_seconds=0.001)
    first = (await _submit(service, debounce=debounce)).job
    claimed = await factories.claim_one(db)
    assert claimed.job_id == first.job_id
    later = await _submit(service, debounce=debounce, payload=b"later")
    assert later.created and later.job.job_id != first.job_id
    assert bytes(sync_db.job(first.job_id)["payload"]) == b"payload"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"singleton_key": "k", "idempotency_key": "i"}, "singleton_key"),
        ({"debounce": Debounce("k", 1, 1), "idempotency_key": "i"}, "debounce"),
        ({"debounce": Debounce("k", 1, 1), "singleton_key": "k"}, "debounce"),
        ({"debounce": Debounce("k", 0, 1)}, "debounce.quiet_seconds"),
        ({"debounce": Debounce("k", 5, 1)}, "debounce.max_wait_seconds"),
        ({"debounce": Debounce("", 1, 1)}, "debounce.key"),
        ({"sequence_key": ""}, "sequence_key"),
        ({"sequence_key": "x" * 257}, "sequence_key"),
    ],
)
async def test_malformed_keyed_submissions_are_refused_naming_the_field(db, fields, field):
    service = await factories.submission_service(db)
    with pytest.raises(InvalidArgument) as refused:
        await _submit(service, **fields)
    assert field in [v.field for v in refused.value.violations]


@pytest.mark.parametrize(
    "fields",
    [{"sequence_key": "s"}, {"singleton_key": "k"}, {"debounce": Debounce("k", 1, 1)}],
)
def test_a_schedules_job_refuses_each_keyed_field_by_name(fields):
    with pytest.raises(InvalidArgument) as refused:
        template_from_job(factories.new_job(**fields))
    (name,) = fields
    assert [v.field for v in refused.value.violations] == [f"job.{name}"]


async def test_a_batch_decides_its_keyed_items_in_request_order(db, sync_db):
    service = await factories.submission_service(db)
    outcomes = await service.submit_many(
        A,
        "tenant:a",
        [
            factories.new_job(sequence_key="doc"),
            factories.new_job(singleton_key="k"),
            factories.new_job(sequence_key="doc"),
            factories.new_job(singleton_key="k", payload=b"other"),
            factories.new_job(debounce=Debounce("d", 30, 60), payload=b"first"),
            factories.new_job(debounce=Debounce("d", 30, 60), payload=b"last"),
        ],
    )
    first, single, second, single_again, debounced, debounced_again = outcomes
    assert (single_again.job.job_id, single_again.created) == (single.job.job_id, False)
    assert (debounced_again.job.job_id, debounced_again.created) == (debounced.job.job_id, False)
    assert bytes(sync_db.job(debounced.job.job_id)["payload"]) == b"last"
    assert [sync_db.job(o.job.job_id)["parked_on"] for o in (first, second)] == [None, ""]
    claimed = {c.job_id for c in await factories.claim(db, limit=10)}
    assert claimed == {first.job.job_id, single.job.job_id}
