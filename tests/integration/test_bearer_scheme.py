"""The API accepts the bearer scheme in any case, as RFC 6750 (through RFC 7235) allows: clients and
proxies that write `bearer` or `BEARER` are not turned away."""

from __future__ import annotations

import grpc
import pytest

from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from tests.process_fixtures import ServiceStack, tenant_token

pytestmark = pytest.mark.timeout(120)


def _get(stub: jobs_pb2_grpc.JobServiceStub, job_id: str, authorization: str) -> jobs_pb2.Job:
    return stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=(("authorization", authorization),), timeout=10)


def test_the_bearer_scheme_is_case_insensitive(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    job_id = service_stack.tenant("acme").submit("echo", b"x").job.job_id
    stub = jobs_pb2_grpc.JobServiceStub(service_stack.channel())
    token = tenant_token("acme")

    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        assert _get(stub, job_id, f"{scheme} {token}").job_id == job_id, scheme

    for refused in (f"Basic {token}", f"Bearer{token}", token):
        with pytest.raises(grpc.RpcError) as raised:
            _get(stub, job_id, refused)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused
