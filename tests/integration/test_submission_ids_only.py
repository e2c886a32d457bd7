"""SubmitJobs answering only ids: the same rows, history, idempotency and tenant walls as the full
answer, without reading the jobs back."""

from __future__ import annotations

import grpc
import pytest

from api_service.metrics import SubmissionMetrics
from api_service.usecases.submission import SubmissionService
from jobs.v1 import jobs_pb2
from shared.domain.errors import AlreadyExists
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database
from tests import factories
from tests.process_fixtures import ServiceStack

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


@pytest.mark.timeout(180)
def test_submit_jobs_with_ids_only_answers_ids_and_created_only(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    client = service_stack.tenant("acme")
    items = [jobs_pb2.SubmitJobRequest(kind="echo", payload=b"a", idempotency_key="once")]
    items += [jobs_pb2.SubmitJobRequest(kind="echo", payload=b"%d" % n) for n in range(3)]

    def submit(ids_only: bool) -> jobs_pb2.SubmitJobsResponse:
        request = jobs_pb2.SubmitJobsRequest(jobs=items, ids_only=ids_only)
        return client.stub.SubmitJobs(request, metadata=client.metadata, timeout=30)

    answer = submit(ids_only=True)
    full = submit(ids_only=False)

    assert not answer.results and len(answer.job_ids) == 4
    assert list(answer.created) == [True] * 4
    assert full.results[0].job.job_id == answer.job_ids[0] and not full.results[0].created
    assert not full.job_ids and not full.created
    for job_id in answer.job_ids:
        assert client.get(job_id).state == jobs_pb2.JOB_STATE_PENDING
    with pytest.raises(grpc.RpcError) as foreign:
        service_stack.tenant("globex").get(answer.job_ids[1])
    assert foreign.value.code() == grpc.StatusCode.NOT_FOUND


async def test_ids_only_counts_the_jobs_it_created_and_not_the_replays(db):
    metrics = SubmissionMetrics()
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits(), metrics=metrics)
    keyed = factories.new_job(kind="echo", idempotency_key="once")

    await service.submit_many_ids(TENANT, ACTOR, [factories.new_job(kind="echo") for _ in range(3)] + [keyed])
    await service.submit_many_ids(TENANT, ACTOR, [keyed])

    counted = metrics.registry.get_sample_value("jobs_submitted_total", {"tenant": TENANT, "kind": "echo"})
    assert counted == 4
