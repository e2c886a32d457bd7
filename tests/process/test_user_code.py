"""User code as its owners write it, against the real API and worker processes: kinds that only the
workers load, plain and CPU-bound handlers beside short jobs, and stops that reach every handler shape."""

from __future__ import annotations

from pathlib import Path

import grpc
import psycopg
import pytest

from jobs.v1 import jobs_pb2
from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceProcess, ServiceStack, TenantClient, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

S = jobs_pb2.JobState
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}
# Three heartbeats a lease: at 2 s, a replica on a machine at a load of 10 missed all three once.
LEASE_SECONDS = 3.0
SHORT_JOBS = 40


def _state(client: TenantClient, job_id: str) -> str:
    return S.Name(client.get(job_id).state).removeprefix("JOB_STATE_")


def _settled(client: TenantClient, job_id: str, timeout: float = 60) -> jobs_pb2.Job:
    terminal = {"SUCCEEDED", "FAILED", "CANCELLED", "OUTCOME_UNKNOWN", "SUPERSEDED"}
    wait_until(lambda: _state(client, job_id) in terminal, timeout=timeout, what=f"job {job_id} to settle")
    return client.get(job_id)


def _running(client: TenantClient, job_id: str) -> None:
    wait_until(lambda: _state(client, job_id) == "RUNNING", timeout=30, what=f"job {job_id} to run")


def _published(database_url: str) -> dict[str, tuple[int, str]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT kind, max_attempts, executor::text FROM job_kinds WHERE retired_at IS NULL")
        return {kind: (attempts, executor) for kind, attempts, executor in rows}


def test_a_kind_only_the_workers_load_is_accepted_with_the_policy_they_published(service_stack: ServiceStack):
    api = service_stack.start_api()  # no handler modules: the API never imports user code
    client = service_stack.tenant("acme")
    with pytest.raises(grpc.RpcError) as unknown:
        client.submit("plain.echo", b"x")
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "kind" in (unknown.value.details() or "")

    service_stack.start_worker("w1", **TEST_HANDLERS)
    published = _published(service_stack.database_url)
    assert published["plain.echo"] == (2, "thread") and published["cpu.process"] == (1, "process")
    job = client.submit("plain.echo", b"hello").job
    assert job.max_attempts == 2, "the API applies the policy the worker published"
    assert _settled(client, job.job_id).state == S.JOB_STATE_SUCCEEDED
    assert client.result(job.job_id).payload == b"hello"
    assert "JOBS_HANDLER_MODULES" not in api.log_text()


def test_the_api_ignores_handler_modules_with_a_warning(service_stack: ServiceStack):
    api = service_stack.start_api(JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    assert "JOBS_HANDLER_MODULES is ignored by the API" in api.log_text()
    with pytest.raises(grpc.RpcError) as unknown:
        service_stack.tenant("acme").submit("charge")
    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_replicas_that_disagree_on_a_policy_are_reported(service_stack: ServiceStack):
    service_stack.start_api()
    old = service_stack.start_worker("old", **TEST_HANDLERS, JOBS_KIND_PUBLISH_INTERVAL_SECONDS="0.3")
    new = service_stack.start_worker(
        "new", **TEST_HANDLERS, JOBS_KIND_PUBLISH_INTERVAL_SECONDS="0.3", JOBS_TEST_VARIANT_MAX_ATTEMPTS="4"
    )
    for replica in (old, new):

        def conflict_reported(r: ServiceProcess = replica) -> bool:
            return r.metric_value("jobs_kind_policy_conflicts", {"kind": "variant"}) == 2

        wait_until(
            conflict_reported,
            timeout=30,
            what=f"{replica.name} to report the conflict",
        )
    assert "replicas publish 2 different policies for kind variant" in old.log_text()
    assert old.metric_value("jobs_kind_policy_conflicts", {"kind": "echo"}) == 0
    # The replica that started last wins, however often the older one refreshes its publication.
    assert _published(service_stack.database_url)["variant"][0] == 4
    assert service_stack.tenant("acme").submit("variant").job.max_attempts == 4


def test_cpu_bound_handlers_for_twice_the_lease_cost_no_lease_and_no_innocent_job(service_stack: ServiceStack):
    service_stack.start_api()
    worker = service_stack.start_worker(
        "w1", **TEST_HANDLERS, JOBS_LEASE_SECONDS=str(LEASE_SECONDS), JOBS_WORKER_CONCURRENCY="6"
    )
    client = service_stack.tenant("acme")
    seconds = str(2 * LEASE_SECONDS + 1).encode()
    heavy = [client.submit(kind, seconds).job.job_id for kind in ("cpu.process", "cpu.thread")]
    for job_id in heavy:
        _running(client, job_id)
    short = [client.submit("echo", b"%d" % i).job.job_id for i in range(SHORT_JOBS)]
    short += [client.submit("plain.echo", b"%d" % i).job.job_id for i in range(SHORT_JOBS)]
    for job_id in short:
        job = _settled(client, job_id)
        assert (job.state, job.attempts) == (S.JOB_STATE_SUCCEEDED, 1), job
    for job_id in heavy:
        job = _settled(client, job_id)
        assert (job.state, job.attempts) == (S.JOB_STATE_SUCCEEDED, 1), job
        assert client.result(job_id).payload.startswith(b"spun ")
    assert worker.metric_value("jobs_leases_lost_total") == 0


def test_failures_of_plain_and_process_handlers_are_classified(service_stack: ServiceStack):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    crash = _settled(client, client.submit("plain.crash").job.job_id)
    assert (crash.state, crash.attempts) == (S.JOB_STATE_FAILED, 2)
    assert crash.last_error.category == jobs_pb2.ERROR_CATEGORY_RETRYABLE
    assert "KeyError" in crash.last_error.message
    child = _settled(client, client.submit("process.crash").job.job_id)
    assert child.state == S.JOB_STATE_FAILED
    assert child.last_error.message.startswith("ZeroDivisionError: division by zero in the child")
    died = _settled(client, client.submit("process.exit").job.job_id)
    assert died.state == S.JOB_STATE_FAILED and "exited with code 9" in died.last_error.message
    assert _settled(client, client.submit("plain.echo", b"still serving").job.job_id).state == S.JOB_STATE_SUCCEEDED


def test_a_cancel_reaches_a_plain_handler_and_terminates_a_stubborn_process(
    service_stack: ServiceStack, tmp_path: Path
):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    pid_file = tmp_path / "stubborn.pid"
    jobs = [
        client.submit("wait.thread").job.job_id,
        client.submit("stubborn.process", str(pid_file).encode()).job.job_id,
    ]
    for job_id in jobs:
        _running(client, job_id)
    pid = int(
        wait_until(lambda: pid_file.read_text() if pid_file.exists() else None, timeout=30, what="the child's pid")
    )
    for job_id in jobs:
        client.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id, reason="test"), metadata=client.metadata)
    for job_id in jobs:
        assert _settled(client, job_id).state == S.JOB_STATE_CANCELLED
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="the stubborn handler to be terminated")


def test_every_failed_attempt_keeps_its_error_and_traceback(service_stack: ServiceStack):
    service_stack.start_api()
    worker = service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    job_id = client.submit("plain.crash").job.job_id
    assert _settled(client, job_id).state == S.JOB_STATE_FAILED
    events = client.stub.ListJobEvents(jobs_pb2.ListJobEventsRequest(job_id=job_id), metadata=client.metadata).events
    failed = [e for e in events if e.HasField("error")]
    assert [(e.attempt, e.to_state) for e in failed] == [(1, S.JOB_STATE_RETRY_WAIT), (2, S.JOB_STATE_FAILED)]
    for event in failed:
        assert event.error.message == f"KeyError: 'missing field on attempt {event.attempt}'"
        assert 'handlers_for_tests.py", line' in event.error.traceback and "in plain_crash" in event.error.traceback
        assert "worker_service" not in event.error.traceback, "the handler's frames, not the worker's"
    assert "in plain_crash" in worker.log_text(), "the log carries the traceback too"

    shown = jobsctl(service_stack.api_target, "events", job_id)
    assert shown.code == 0, shown.stderr
    for attempt in (1, 2):
        assert f"attempt {attempt} (seq" in shown.text and f"missing field on attempt {attempt}" in shown.text
    assert shown.text.count("in plain_crash") == 2
    print(shown.text)

    child = _settled(client, client.submit("process.crash").job.job_id)
    (child_error,) = [
        e.error
        for e in client.stub.ListJobEvents(
            jobs_pb2.ListJobEventsRequest(job_id=child.job_id), metadata=client.metadata
        ).events
        if e.HasField("error")
    ]
    assert "in process_crash" in child_error.traceback, "a child process's traceback comes back too"
    assert "worker_service" not in child_error.traceback


def test_declared_kinds_with_typed_payloads_run_and_refuse_a_bad_payload_permanently(service_stack: ServiceStack):
    service_stack.start_api()
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_declared")
    client = service_stack.tenant("acme")
    ok = client.submit("greet", b'{"name": "ada", "times": 2}').job.job_id
    in_child = client.submit("greet.process", b'{"name": "grace"}').job.job_id
    bad = client.submit("greet", b'{"name": "ada", "times": "twice"}').job.job_id
    assert _settled(client, ok).state == S.JOB_STATE_SUCCEEDED
    assert client.result(ok).payload == b"hello ada hello ada"
    assert _settled(client, in_child).state == S.JOB_STATE_SUCCEEDED
    assert client.result(in_child).payload == b"grace from a child process"
    refused = _settled(client, bad)
    assert (refused.state, refused.attempts) == (S.JOB_STATE_FAILED, 1)
    assert refused.last_error.category == jobs_pb2.ERROR_CATEGORY_PERMANENT
    assert refused.last_error.message == "payload.times: must be int, not str"


def test_a_job_handed_back_at_shutdown_keeps_its_attempts_unless_a_call_is_unconfirmed(service_stack: ServiceStack):
    service_stack.start_api()
    client = service_stack.tenant("acme")
    quick_stop = {**TEST_HANDLERS, "JOBS_SHUTDOWN_GRACE_SECONDS": "0.2"}
    service_stack.start_worker("w0", **TEST_HANDLERS).stop()  # publishes the test kinds
    slow = client.submit("sleep", b'{"seconds": 60}').job.job_id
    charge = client.submit("charge.slow").job.job_id
    for restart in range(2):
        worker = service_stack.start_worker(f"w{restart + 1}", **quick_stop)
        _running(client, slow)
        if restart == 0:
            _running(client, charge)
        assert worker.stop() == 0
        job = client.get(slow)
        assert (job.state, job.attempts) == (S.JOB_STATE_PENDING, 0), f"restart {restart + 1}: {job}"
    unknown = client.get(charge)
    assert (unknown.state, unknown.attempts) == (S.JOB_STATE_OUTCOME_UNKNOWN, 1)
    assert "unconfirmed external call" in unknown.last_error.message
    events = client.stub.ListJobEvents(jobs_pb2.ListJobEventsRequest(job_id=slow), metadata=client.metadata).events
    assert [e.reason for e in events if e.to_state == S.JOB_STATE_PENDING][1:] == ["released: worker shutting down"] * 2


def _probe(worker: ServiceProcess, path: str) -> tuple[int, str]:
    """The probe's status and text; (0, why) when the connection failed, so a wait polls again."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.metrics_port}{path}", timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as error:
        try:
            return error.code, error.read().decode().strip()
        except OSError as unread:  # the server closed before the body was read: a busy machine
            return 0, repr(unread)
    except OSError as failed:
        return 0, repr(failed)


def test_worker_probes_tell_a_blocked_loop_and_a_lost_api(service_stack: ServiceStack):
    api = service_stack.start_api()
    worker = service_stack.start_worker("w1", **TEST_HANDLERS, JOBS_LIVENESS_STALL_SECONDS="1")
    wait_until(lambda: _probe(worker, "/readyz") == (200, "ok"), timeout=30, what="the worker to be ready")
    assert _probe(worker, "/livez") == (200, "ok")

    client = service_stack.tenant("acme")
    client.submit("poison.hang")  # blocks the worker's event loop for seconds
    status, why = wait_until(
        lambda: p if (p := _probe(worker, "/livez"))[0] == 503 else None, timeout=30, what="liveness to fail"
    )
    assert why.startswith("event loop blocked for")
    wait_until(lambda: _probe(worker, "/livez") == (200, "ok"), timeout=30, what="liveness to recover")

    api.stop()
    wait_until(lambda: _probe(worker, "/readyz") == (503, "API unreachable"), timeout=30, what="readiness to fail")
    assert _probe(worker, "/livez") == (200, "ok"), "a lost API is not a dead worker"
    service_stack.start_api("api-again")
    wait_until(lambda: _probe(worker, "/readyz") == (200, "ok"), timeout=30, what="readiness to recover")
    assert "jobs_claimed_total" in worker.metrics_text(), "metrics are still served on the same listener"
