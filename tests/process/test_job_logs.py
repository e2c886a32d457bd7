"""What handlers log is kept with their attempt: ctx.log and logging records from coroutine, thread and
process handlers, shipped by the worker under the lease, bounded, readable through ListJobLogs (the
SDK's Client.logs), `jobsctl logs` and the console, and walled off from other tenants."""

from __future__ import annotations

import pytest

from durable_jobs import Client, JobState
from durable_jobs.errors import InvalidArgument, NotFound
from durable_jobs.logs import JOB_LOG_LINES_PER_ATTEMPT_MAX
from jobs.v1 import jobs_pb2, worker_pb2
from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceStack, tenant_token, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests", "JOBS_PROGRESS_INTERVAL_SECONDS": "0.2"}


@pytest.fixture(scope="module")
def service_stack(module_service_stack: ServiceStack) -> ServiceStack:
    """One API and one worker for the module: each test submits and reads its own jobs."""
    module_service_stack.start_api()
    module_service_stack.start_worker("w1", **TEST_HANDLERS)
    return module_service_stack


@pytest.fixture
def client(service_stack: ServiceStack):
    with Client(service_stack.api_target, tenant_token("acme"), timeout=20) as jobs:
        yield jobs


@pytest.mark.parametrize("executor", ["async", "thread", "process"])
def test_each_attempt_keeps_what_its_handler_logged(client: Client, executor: str) -> None:
    job = client.submit(f"logs.{executor}")
    assert client.result(job.job_id, wait=True, timeout=60) == b"logged"
    lines = client.logs(job.job_id)
    assert [(line.attempt, line.sequence, line.level, line.logger, line.message) for line in lines] == [
        (1, 1, "INFO", "durable_jobs.job", f"attempt 1 of logs.{executor} starting"),
        (1, 2, "WARNING", "tests.user_code", "a record of the handler's own logger"),
        (2, 1, "INFO", "durable_jobs.job", f"attempt 2 of logs.{executor} starting"),
        (2, 2, "WARNING", "tests.user_code", "a record of the handler's own logger"),
    ]
    assert lines[0].fencing_token < lines[2].fencing_token and all(line.at is not None for line in lines)
    assert [line.attempt for line in client.logs(job.job_id, attempt=2)] == [2, 2]


def test_an_attempt_keeps_a_bounded_log_and_says_how_much_it_dropped(client: Client) -> None:
    job = client.submit("logs.chatty", str(JOB_LOG_LINES_PER_ATTEMPT_MAX + 10))
    client.result(job.job_id, wait=True, timeout=60)
    lines = client.logs(job.job_id)
    assert len(lines) == JOB_LOG_LINES_PER_ATTEMPT_MAX + 1
    assert [line.sequence for line in lines] == list(range(1, JOB_LOG_LINES_PER_ATTEMPT_MAX + 2))
    assert lines[-1].message.startswith("10 more lines were not kept")


def test_another_tenant_and_a_stale_lease_see_and_write_nothing(client: Client, service_stack: ServiceStack) -> None:
    job = client.submit("logs.async")
    client.result(job.job_id, wait=True, timeout=60)
    with Client(service_stack.api_target, tenant_token("globex")) as other, pytest.raises(NotFound):
        other.logs(job.job_id)
    with pytest.raises(InvalidArgument):
        client.logs(job.job_id, attempt=-1)
    stub, metadata = service_stack.worker_stub()
    line = jobs_pb2.JobLogLine(sequence=99, level="INFO", logger="x", message="from a stale lease")
    request = worker_pb2.AppendJobLogsRequest(
        logs=[worker_pb2.AttemptLog(job_id=job.job_id, fencing_token=1, lines=[line])]
    )
    answer = stub.AppendJobLogs(request, metadata=metadata, timeout=10)
    assert [o.outcome for o in answer.outcomes] == [worker_pb2.REPORT_OUTCOME_LEASE_LOST]
    assert "from a stale lease" not in [line.message for line in client.logs(job.job_id)]


def test_jobsctl_logs_prints_each_attempt_under_its_heading(client: Client, service_stack: ServiceStack) -> None:
    job = client.submit("logs.thread")
    wait_until(lambda: client.get(job.job_id).state is JobState.SUCCEEDED, timeout=60, what="the job")
    run = jobsctl(service_stack.api_target, "logs", job.job_id)
    assert run.code == 0, run.stderr
    text = run.text
    assert text.index("attempt 1 (fencing token") < text.index("attempt 2 (fencing token")
    assert "WARNING tests.user_code: a record of the handler's own logger" in text
