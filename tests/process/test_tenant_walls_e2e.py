"""Tenants are walls on every JobService RPC, through the real API, with the stack running as the
least-privileged database roles that the migrations create."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import cast

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2

from jobs.v1 import jobs_pb2
from shared.rpc_error_details import STATUS_DETAILS_METADATA_KEY
from tests.database_roles import ServiceLogins
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MISSING = "00000000-0000-4000-8000-000000000000"
TEST_HANDLERS = "tests.handlers_for_tests"
S = jobs_pb2  # short alias for the many request messages below


def _answer(call) -> tuple:
    """Everything a caller can observe of a refusal: code, message and the detail bytes."""
    with pytest.raises(grpc.RpcError) as raised:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, bytes | str):
            list(result)
    error = raised.value
    details = dict(cast(Iterable[tuple[str, bytes]], error.trailing_metadata() or ())).get(STATUS_DETAILS_METADATA_KEY)
    return error.code(), error.details(), details


def _by_job_id(client: TenantClient, job_id: str) -> dict[str, object]:
    stub, md = client.stub, client.metadata
    return {
        "GetJob": lambda: stub.GetJob(S.GetJobRequest(job_id=job_id), metadata=md, timeout=10),
        "GetJobResult": lambda: stub.GetJobResult(S.GetJobResultRequest(job_id=job_id), metadata=md, timeout=10),
        "WatchJob": lambda: stub.WatchJob(S.WatchJobRequest(job_id=job_id), metadata=md, timeout=10),
        "CancelJob": lambda: stub.CancelJob(S.CancelJobRequest(job_id=job_id, reason="x"), metadata=md, timeout=10),
        "RetryJob": lambda: stub.RetryJob(
            S.RetryJobRequest(job_id=job_id, accept_duplicate_risk=True), metadata=md, timeout=10
        ),
        "ListJobEvents": lambda: stub.ListJobEvents(S.ListJobEventsRequest(job_id=job_id), metadata=md, timeout=10),
        "ListJobLogs": lambda: stub.ListJobLogs(S.ListJobLogsRequest(job_id=job_id), metadata=md, timeout=10),
    }


def test_another_tenants_job_answers_exactly_like_a_missing_one_on_every_rpc(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    secret = acme.submit(
        "echo",
        b"acme's secret",
        idempotency_key="shared-key",
        resource_key="report",
        resource_version=5,
        labels={"team": "finance"},
    ).job
    wait_until(lambda: acme.get(secret.job_id).state == S.JOB_STATE_SUCCEEDED, timeout=30, what="acme's job")
    # acme's own reads warm every per-replica cache before globex asks.
    assert acme.result(secret.job_id).payload == b"acme's secret"
    latest = acme.stub.GetLatestResult(S.GetLatestResultRequest(resource_key="report"), metadata=acme.metadata)
    assert latest.result.payload == b"acme's secret"

    for name, call in _by_job_id(globex, secret.job_id).items():
        assert _answer(call) == _answer(_by_job_id(globex, MISSING)[name]), name
        assert _answer(call)[0] == grpc.StatusCode.NOT_FOUND, name

    def latest_for(key: str):
        return lambda: globex.stub.GetLatestResult(S.GetLatestResultRequest(resource_key=key), metadata=globex.metadata)

    assert _answer(latest_for("report")) == _answer(latest_for("never-submitted"))
    for filters in (
        {},
        {"kind": "echo"},
        {"resource_key": "report"},
        {"labels": {"team": "finance"}},
        {"states": [S.JOB_STATE_SUCCEEDED]},
    ):
        listed = globex.stub.ListJobs(S.ListJobsRequest(**filters), metadata=globex.metadata)
        assert list(listed.jobs) == [], filters

    # Dependencies: another tenant's job id is "no such job", like a random one.
    def depending_on(job_id: str):
        return lambda: globex.submit("echo", depends_on=[job_id])

    assert _answer(depending_on(secret.job_id))[1:] == _answer(depending_on(MISSING))[1:]
    # Idempotency keys and resource versions belong to the tenant that used them.
    mine = globex.submit(
        "echo", b"globex's own", idempotency_key="shared-key", resource_key="report", resource_version=1
    )
    assert mine.created and mine.job.job_id != secret.job_id
    assert mine.job.state == S.JOB_STATE_PENDING  # not superseded by acme's version 5
    assert acme.get(secret.job_id).state == S.JOB_STATE_SUCCEEDED


def _seconds_from_now(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromSeconds(int(time.time() + seconds))
    return stamp


def test_the_stack_runs_as_the_least_privileged_roles(service_stack: ServiceStack, service_logins) -> None:
    url = service_stack.database_url
    api_url, worker_url = ServiceLogins.url(url, service_logins.api), ServiceLogins.url(url, service_logins.worker)
    service_stack.start_api(DATABASE_URL=api_url, JOBS_HANDLER_MODULES=TEST_HANDLERS)
    workers = [
        service_stack.start_worker(name, DATABASE_URL=worker_url, JOBS_HANDLER_MODULES=TEST_HANDLERS)
        for name in ("w1", "w2")
    ]
    client = service_stack.tenant("acme")
    ids = {
        "echo": client.submit("echo", b"plain").job.job_id,
        "retried": client.submit("quick.flaky", json.dumps({"fail_times": 1}).encode()).job.job_id,
        "crash": client.submit("crash.once").job.job_id,
        "charge": client.submit("charge").job.job_id,
        "long": client.submit("sleep", b'{"seconds": 30}').job.job_id,
        "later": client.submit("echo", run_after=_seconds_from_now(3600)).job.job_id,
    }
    # Blocked on a job that will not run for an hour, with a deadline in three seconds: the workers'
    # deadline sweep fails it, and its own dependent fails by trigger in that same worker transaction.
    ids["overdue"] = client.submit("echo", depends_on=[ids["later"]], deadline=_seconds_from_now(3)).job.job_id
    ids["dependent"] = client.submit("echo", depends_on=[ids["overdue"]]).job.job_id

    def state(name: str) -> int:
        return client.get(ids[name]).state

    wait_until(lambda: state("long") == S.JOB_STATE_RUNNING, timeout=30, what="the long job to start")
    client.stub.CancelJob(S.CancelJobRequest(job_id=ids["long"]), metadata=client.metadata)
    # The charge kills its worker after recording its intent; the survivor's lease sweep (run as the
    # worker role) finds the unconfirmed receipt: OUTCOME_UNKNOWN, a person's decision.
    wait_until(lambda: state("charge") == S.JOB_STATE_OUTCOME_UNKNOWN, timeout=60, what="the charge's verdict")
    for worker in workers:
        if worker.popen.poll() is not None:
            workers.append(
                service_stack.start_worker(
                    f"{worker.name}-again", DATABASE_URL=worker_url, JOBS_HANDLER_MODULES=TEST_HANDLERS
                )
            )
    client.stub.RetryJob(
        S.RetryJobRequest(job_id=ids["charge"], reason="checked", accept_duplicate_risk=True), metadata=client.metadata
    )
    expected = {
        "echo": S.JOB_STATE_SUCCEEDED,
        "retried": S.JOB_STATE_SUCCEEDED,
        "crash": S.JOB_STATE_SUCCEEDED,
        "charge": S.JOB_STATE_SUCCEEDED,
        "long": S.JOB_STATE_CANCELLED,
        "later": S.JOB_STATE_PENDING,
        "overdue": S.JOB_STATE_FAILED,
        "dependent": S.JOB_STATE_FAILED,
    }
    wait_until(lambda: {n: state(n) for n in expected} == expected, timeout=90, interval=0.3, what=str(expected))
    assert client.result(ids["charge"]).payload.startswith(b"reconciled:")
    for process in service_stack.processes:
        assert "permission denied" not in process.log_text(), process.name
        assert "row-level security" not in process.log_text(), process.name
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM job_results").fetchone()[0] == 4
