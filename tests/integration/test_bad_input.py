"""Bad input through the API (in this process): INVALID_ARGUMENT naming the field, and nothing written."""

from __future__ import annotations

from typing import Any, cast

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2

from jobs.v1 import jobs_pb2
from shared.rpc_error_details import rpc_error_details
from tests.process_fixtures import ServiceStack

pytestmark = pytest.mark.timeout(120)

PAYLOAD_LIMIT = 4096
# A number that no JobState has, which the API must refuse.
_NO_SUCH_STATE = cast(jobs_pb2.JobState, 42)
JOB_ID = "00000000-0000-4000-8000-000000000000"


def _violations(error: grpc.RpcError) -> list[str]:
    details = rpc_error_details(error)
    assert details is not None, error.details()
    return [field for field, _ in details.field_violations]


def _stamp(seconds: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


BAD_SUBMISSIONS: list[tuple[str, dict[str, Any]]] = [
    ("kind", dict(kind="")),
    ("kind", dict(kind="Echo")),
    ("kind", dict(kind="echo; DROP TABLE jobs")),
    ("kind", dict(kind="no-such-kind")),
    ("kind", dict(kind="e" * 129)),
    ("kind", dict(kind="ec\x00ho")),
    ("payload", dict(kind="echo", payload=b"x" * (PAYLOAD_LIMIT + 1))),
    ("idempotency_key", dict(kind="echo", idempotency_key="k\x00")),
    ("idempotency_key", dict(kind="echo", idempotency_key="k" * 257)),
    ("resource_key", dict(kind="echo", resource_key="doc\x00", resource_version=1)),
    ("resource_key", dict(kind="echo", resource_key="d" * 513, resource_version=1)),
    ("resource_version", dict(kind="echo", resource_key="doc", resource_version=-1)),
    ("resource_version", dict(kind="echo", resource_version=3)),
    ("priority", dict(kind="echo", priority=-1001)),
    ("priority", dict(kind="echo", priority=2**31 - 1)),
    ("max_attempts", dict(kind="echo", max_attempts=-1)),
    ("max_attempts", dict(kind="echo", max_attempts=1000)),
    ("depends_on[0]", dict(kind="echo", depends_on=["not-a-job-id"])),
    ("labels['team']", dict(kind="echo", labels={"team": "a\x00b"})),
    ("labels['team']", dict(kind="echo", labels={"team": "v" * 257})),
    ("labels['bad key']", dict(kind="echo", labels={"bad key": "v"})),
    ("deadline", dict(kind="echo", run_after=_stamp(2_000_000_000), deadline=_stamp(1_900_000_000))),
    ("run_after", dict(kind="echo", run_after=timestamp_pb2.Timestamp(seconds=-(10**13)))),
]


def test_bad_submissions_name_the_field_and_write_nothing(service_stack: ServiceStack) -> None:
    service_stack.start_api(JOBS_MAX_PAYLOAD_BYTES=str(PAYLOAD_LIMIT))
    client = service_stack.tenant("acme")
    for field, fields in BAD_SUBMISSIONS:
        with pytest.raises(grpc.RpcError) as raised:
            client.stub.SubmitJob(jobs_pb2.SubmitJobRequest(**fields), metadata=client.metadata, timeout=5)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, raised.value.details())
        assert field in _violations(raised.value), (field, raised.value.details())
        details = raised.value.details() or ""
        assert "SELECT" not in details and "Traceback" not in details
    with pytest.raises(grpc.RpcError) as raised:
        client.submit_many(
            [jobs_pb2.SubmitJobRequest(kind="echo"), jobs_pb2.SubmitJobRequest(kind="echo", priority=5000)]
        )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(raised.value) == ["jobs[1].priority"]
    with psycopg.connect(service_stack.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert client.submit("echo", b"x" * PAYLOAD_LIMIT).created


def test_bad_reads_are_invalid_argument(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    client = service_stack.tenant("acme")
    calls = [
        ("job_id", lambda: client.get("not-a-uuid")),
        ("job_id", lambda: client.get("ABCDEF00-0000-4000-8000-000000000000")),
        ("job_id", lambda: client.result("'; SELECT 1; --")),
        (
            "page_token",
            lambda: client.stub.ListJobs(jobs_pb2.ListJobsRequest(page_token="garbage!"), metadata=client.metadata),
        ),
        ("page_size", lambda: client.stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=-1), metadata=client.metadata)),
        (
            "states[0]",
            lambda: client.stub.ListJobs(jobs_pb2.ListJobsRequest(states=[_NO_SUCH_STATE]), metadata=client.metadata),
        ),
    ]
    for field, call in calls:
        with pytest.raises(grpc.RpcError) as raised:
            call()
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in _violations(raised.value)
