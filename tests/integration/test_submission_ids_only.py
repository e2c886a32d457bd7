"""SubmitJobs answering only ids: the same rows, history, idempotency and tenant walls as the full
answer, without reading the jobs back."""

from __future__ import annotations

import pytest

from api_service.metrics import SubmissionMetrics
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import AlreadyExists
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(60)

TENANT = TenantId("tenant-a")
ACTOR = "tenant:tenant-a"


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


async def test_ids_only_stores_every_item_in_order_with_its_history(service, sync_db):
    answers = await service.submit_many_ids(TENANT, ACTOR, [factories.new_job(payload=b"%d" % n) for n in range(5)])

    assert [created for _, created in answers] == [True] * 5
    for n, (job_id, _) in enumerate(answers):
        row = sync_db.job(job_id)
        assert (row["tenant"], row["state"], bytes(row["payload"])) == (TENANT, "pending", b"%d" % n)
        event = sync_db.one("SELECT to_state, reason, actor FROM job_events WHERE job_id = %s", (job_id,))
        assert event == {"to_state": "pending", "reason": "submitted", "actor": ACTOR}


async def test_ids_only_replays_keys_and_refuses_a_different_request(service, sync_db):
    keyed = [factories.new_job(payload=b"%d" % n, idempotency_key=f"k{n}") for n in range(2)]
    first = await service.submit_many_ids(TENANT, ACTOR, [factories.new_job(), *keyed])
    replay = await service.submit_many_ids(TENANT, ACTOR, keyed)

    assert [created for _, created in first] == [True, True, True]
    assert replay == [(first[1][0], False), (first[2][0], False)]
    before = sync_db.snapshot()
    with pytest.raises(AlreadyExists):
        await service.submit_many_ids(
            TENANT, ACTOR, [factories.new_job(), factories.new_job(idempotency_key="k0", payload=b"other")]
        )
    assert sync_db.snapshot() == before


async def test_ids_only_counts_the_jobs_it_created_and_not_the_replays(db):
    metrics = SubmissionMetrics()
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits(), metrics=metrics)
    keyed = factories.new_job(kind="echo", idempotency_key="once")

    await service.submit_many_ids(TENANT, ACTOR, [factories.new_job(kind="echo") for _ in range(3)] + [keyed])
    await service.submit_many_ids(TENANT, ACTOR, [keyed])

    counted = metrics.registry.get_sample_value("jobs_submitted_total", {"tenant": TENANT, "kind": "echo"})
    assert counted == 4
