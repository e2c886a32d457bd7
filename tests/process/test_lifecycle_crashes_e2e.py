"""The lifecycle's promises whose proof takes a worker's process: a handler that kills its worker, one
that blocks its worker's event loop past the lease, and one that dies right after an external call."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.test_lifecycle_e2e import TEST_HANDLERS, S, _events, _reason, _retry, _state, _wait_state
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def stack(service_stack: ServiceStack) -> ServiceStack:
    service_stack.start_api(**TEST_HANDLERS)
    return service_stack


def test_a_poison_job_that_kills_its_worker_stops_at_max_attempts(stack: ServiceStack) -> None:
    workers = {name: stack.start_worker(name, **TEST_HANDLERS) for name in ("w1", "w2")}
    client = stack.tenant("acme")
    poison = client.submit("poison.exit").job.job_id
    healthy = [client.submit("echo", b"%d" % i).job.job_id for i in range(20)]
    restarts = 0

    def settled() -> bool:
        nonlocal restarts
        for name, process in list(workers.items()):
            if process.popen.poll() is not None:
                restarts += 1
                workers[name] = stack.start_worker(f"{name}-r{restarts}", **TEST_HANDLERS)
        return _state(client, poison) == "FAILED" and all(_state(client, j) == "SUCCEEDED" for j in healthy)

    wait_until(settled, timeout=60, interval=0.2, what="the poison job to fail and the rest to succeed")
    job = client.get(poison)
    assert (job.attempts, job.max_attempts) == (3, 3)
    assert restarts == 3, "each attempt killed one worker"
    assert "final attempt" in job.last_error.message


def test_a_poison_job_that_hangs_past_its_lease_stops_at_max_attempts(stack: ServiceStack) -> None:
    for name in ("w1", "w2", "w3"):
        stack.start_worker(name, **TEST_HANDLERS, JOBS_WORKER_CONCURRENCY="1")
    client = stack.tenant("acme")
    poison = client.submit("poison.hang").job.job_id
    wait_until(lambda: _state(client, poison) == "RUNNING", timeout=10, what="the hang to start")
    healthy = [client.submit("echo", b"%d" % i).job.job_id for i in range(10)]
    job = _wait_state(client, poison, "FAILED", timeout=40)
    assert job.attempts == 2
    wait_until(lambda: all(_state(client, j) == "SUCCEEDED" for j in healthy), timeout=30, what="healthy jobs")


def test_an_unconfirmed_external_call_needs_a_decision_and_the_retry_reconciles(stack: ServiceStack) -> None:
    first = stack.start_worker("w1", **TEST_HANDLERS)
    client = stack.tenant("acme")
    job_id = client.submit("charge").job.job_id
    first.popen.wait(15)  # the handler died right after sending the charge
    stack.start_worker("w2", **TEST_HANDLERS)
    job = _wait_state(client, job_id, "OUTCOME_UNKNOWN", timeout=20)
    assert "unconfirmed external call" in job.last_error.message
    assert job.attempts == 1

    with pytest.raises(grpc.RpcError) as refused:
        _retry(client, job_id, "customer asked")
    assert (refused.value.code(), _reason(refused.value)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "DUPLICATE_RISK_NOT_ACCEPTED",
    )
    assert _state(client, job_id) == "OUTCOME_UNKNOWN"

    reopened = _retry(client, job_id, "checked with the provider", accept=True)
    assert reopened.state == S.JOB_STATE_PENDING
    _wait_state(client, job_id, "SUCCEEDED")
    result = client.result(job_id)
    assert result.payload.startswith(b"reconciled:ch_")
    assert (result.attempt, result.fencing_token) == (2, 2)
    retry_event = next(e for e in _events(client, job_id) if "manual retry" in e.reason)
    assert retry_event.actor == "tenant:acme"
    assert "checked with the provider" in retry_event.reason and "duplicate risk accepted" in retry_event.reason
