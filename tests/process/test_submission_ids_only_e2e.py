"""SubmitJobs with ids_only through the real API process: ids and created flags only, tenant walls kept."""

from __future__ import annotations

import grpc
import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack

pytestmark = pytest.mark.timeout(60)


@pytest.mark.e2e
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
