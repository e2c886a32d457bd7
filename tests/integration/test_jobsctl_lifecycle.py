"""`jobsctl watch`, `cancel`, `retry` and `events` against the API and workers (in this process): what a
user sees, and the exit code that tells a script how the job ended. A watch across an API process's
restart is in tests/process/test_jobsctl_watch_restart_e2e.py."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from jobs.v1 import jobs_pb2
from tests.jobsctl_process import jobsctl, start_jobsctl
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = pytest.mark.timeout(120)

WATCH_TIMEOUT_SECONDS = 60


@pytest.fixture
def api(service_stack: ServiceStack) -> str:
    service_stack.start_api()
    return service_stack.api_target


def _submit(api: str, kind: str, payload: str) -> str:
    run = jobsctl(api, "submit", kind, "--payload", payload)
    assert run.code == 0, run.stderr
    return run.text.strip()


def _states(watch_output: str) -> list[str]:
    """The STATE column of `watch` lines: elapsed, #sequence, state, ..."""
    return [line.split()[2] for line in watch_output.splitlines() if line.strip()]


def test_watch_shows_each_transition_live_and_exits_0_on_success(service_stack: ServiceStack, api: str) -> None:
    job_id = _submit(api, "sleep", '{"seconds": 1.5}')
    watch = start_jobsctl(api, "watch", job_id)
    assert watch.stdout is not None
    # Before any worker exists the job waits, and watch says so and keeps going.
    first_line = watch.stdout.readline().decode()
    assert first_line.split()[1:3] == ["#1", "PENDING"], first_line
    assert watch.poll() is None
    service_stack.start_worker("w1")
    out, err = watch.communicate(timeout=WATCH_TIMEOUT_SECONDS)
    transcript = first_line + out.decode()
    print(f"$ jobsctl watch {job_id}\n{transcript}")
    assert watch.returncode == 0, err
    assert _states(transcript) == ["PENDING", "RUNNING", "SUCCEEDED"]
    sequences = [int(line.split()[1].lstrip("#")) for line in transcript.splitlines()]
    assert sequences == sorted(sequences) and len(set(sequences)) == 3
    assert "attempt 1 of" in transcript.splitlines()[1]


def test_watch_json_is_one_job_per_line(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1")
    job_id = _submit(api, "echo", "hi")
    run = jobsctl(api, "--output", "json", "watch", job_id)
    assert run.code == 0, run.stderr
    states = [json.loads(line)["state"] for line in run.text.splitlines()]
    assert states[-1] == "JOB_STATE_SUCCEEDED"
    assert all(json.loads(line)["job_id"] == job_id for line in run.text.splitlines())


def test_a_failed_job_exits_6_then_a_manual_retry_runs_it_again(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1")
    job_id = _submit(api, "flaky", '{"fail_times": 1, "category": "permanent"}')
    watched = jobsctl(api, "watch", job_id)
    assert watched.code == 6, watched.stderr
    assert _states(watched.text)[-1] == "FAILED"
    assert "last error PERMANENT: flaky: attempt 1" in watched.text.splitlines()[-1]
    assert jobsctl(api, "result", "--wait", job_id).code == 6

    retried = jobsctl(api, "retry", job_id, "--reason", "fixed the upstream")
    assert retried.code == 0, retried.stderr
    assert retried.text.strip() == f"{job_id} retried; state PENDING"
    assert jobsctl(api, "watch", job_id).code == 0
    assert jobsctl(api, "result", job_id).stdout == b'{"fail_times": 1, "category": "permanent"}'

    events = jobsctl(api, "events", job_id)
    assert events.code == 0, events.stderr
    table, _, attempt_errors = events.text.partition("\n\n")  # each failed attempt's error follows the table
    rows = [line.split(None, 7) for line in table.splitlines()]
    assert "attempt 1 (seq" in attempt_errors and "flaky: attempt 1" in attempt_errors
    assert rows[0] == ["SEQ", "AT", "FROM", "TO", "ATTEMPT", "FENCING", "ACTOR", "REASON"]
    retry_row = next(row for row in rows[1:] if row[2] == "FAILED")
    assert retry_row[3] == "PENDING" and retry_row[6] == "tenant:acme" and "fixed the upstream" in retry_row[7]
    assert [row[3] for row in rows[1:]][-1] == "SUCCEEDED"


def test_outcome_unknown_exits_8_and_a_retry_needs_the_duplicate_risk_accepted(
    service_stack: ServiceStack, api: str
) -> None:
    service_stack.start_worker("w1")
    job_id = _submit(api, "flaky", '{"fail_times": 1, "category": "unknown"}')
    watched = jobsctl(api, "watch", job_id)
    assert watched.code == 8, watched.stderr
    assert _states(watched.text)[-1] == "OUTCOME_UNKNOWN"

    refused = jobsctl(api, "retry", job_id)
    assert refused.code == 4
    assert "DUPLICATE_RISK_NOT_ACCEPTED" in refused.stderr
    accepted = jobsctl(api, "retry", job_id, "--accept-duplicate-risk", "--reason", "checked: not charged")
    assert accepted.code == 0, accepted.stderr
    assert jobsctl(api, "watch", job_id).code == 0


def test_cancel_of_a_waiting_job_is_immediate_and_watch_exits_7(api: str) -> None:
    job_id = _submit(api, "echo", "never run")  # no worker: it stays pending
    cancelled = jobsctl(api, "cancel", job_id, "--reason", "not needed")
    assert (cancelled.code, cancelled.text.strip()) == (0, f"{job_id} CANCELLED"), cancelled.stderr
    assert jobsctl(api, "watch", job_id).code == 7
    again = jobsctl(api, "cancel", job_id)
    assert again.code == 4
    assert "FAILED_PRECONDITION" in again.stderr


def test_cancel_of_a_running_job_is_requested_and_the_worker_stops_it(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1")
    job_id = _submit(api, "sleep", '{"seconds": 30}')
    watch = start_jobsctl(api, "watch", job_id)
    output = watch.stdout
    assert output is not None
    wait_until(lambda: b"RUNNING" in output.readline(), timeout=20, what="the job to run")
    cancelled = jobsctl(api, "cancel", job_id)
    assert cancelled.code == 0, cancelled.stderr
    assert "cancel requested; state RUNNING" in cancelled.text
    out, _ = watch.communicate(timeout=WATCH_TIMEOUT_SECONDS)
    assert watch.returncode == 7
    assert _states(out.decode())[-1] == "CANCELLED"


def test_watch_gives_up_at_max_wait_with_exit_5(api: str) -> None:
    job_id = _submit(api, "echo", "nobody runs this")
    run = jobsctl(api, "watch", job_id, "--max-wait", "1")
    assert run.code == 5
    assert "did not settle within 1s" in run.stderr
    assert _states(run.text) == ["PENDING"]


def test_unknown_job_is_not_found_for_every_command(api: str) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for command in (["watch", missing], ["cancel", missing], ["retry", missing], ["events", missing]):
        run = jobsctl(api, *command)
        assert run.code == 3, (command, run.stderr)


# A heartbeat every 100 s: a cancel that arrives sooner came by notification.
NOTIFIED_WORKER_ENV = {"JOBS_LEASE_SECONDS": "300"}
CANCEL_BY_NOTIFICATION_BOUND_SECONDS = 30


def test_a_running_job_stops_on_notification_long_before_its_next_heartbeat(
    service_stack: ServiceStack, api: str
) -> None:
    service_stack.start_worker("w1", **NOTIFIED_WORKER_ENV)
    client = service_stack.tenant("acme")
    job_id = _submit(api, "sleep", '{"seconds": 240}')
    wait_until(lambda: client.get(job_id).state == jobs_pb2.JOB_STATE_RUNNING, timeout=30, what="the job to run")
    wait_until(lambda: client.get(job_id).started_at.seconds, timeout=5, what="the attempt to start")
    requested = time.monotonic()
    cancelled = jobsctl(api, "cancel", job_id)
    assert cancelled.code == 0, cancelled.stderr
    wait_until(
        lambda: client.get(job_id).state == jobs_pb2.JOB_STATE_CANCELLED,
        timeout=CANCEL_BY_NOTIFICATION_BOUND_SECONDS,
        what="the worker to stop the job without waiting for its heartbeat (100 s)",
    )
    events = json.loads(jobsctl(api, "-o", "json", "events", job_id).text)["events"]
    at = {event["reason"]: datetime.fromisoformat(event["at"]) for event in events}
    print(
        f"cancel requested to CANCELLED: {(at['cancelled'] - at['cancel requested']).total_seconds() * 1000:.0f} ms "
        f"in the job's history, {time.monotonic() - requested:.2f}s seen by the client (jobsctl's start included)"
    )
