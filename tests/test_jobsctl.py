"""`python -m jobsctl` against the real API and a worker: outputs and exit codes as a user sees them."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceStack, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def api(service_stack: ServiceStack) -> str:
    service_stack.start_api()
    return service_stack.api_target


def test_submitted_echo_job_yields_its_payload_as_the_result(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1")
    submitted = jobsctl(api, "submit", "echo", "--payload-file", "-", stdin=b"\x00binary\xff")
    assert submitted.code == 0, submitted.stderr
    job_id = submitted.text.strip()
    assert "submitted; state PENDING" in submitted.stderr

    result = jobsctl(api, "--timeout", "30", "result", "--wait", job_id)
    assert (result.code, result.stdout) == (0, b"\x00binary\xff"), result.stderr

    shown = jobsctl(api, "get", job_id)
    assert shown.code == 0
    assert "state          SUCCEEDED" in shown.text.splitlines()

    listed = jobsctl(api, "list", "--state", "succeeded")
    assert listed.code == 0
    assert [line.split()[:3] for line in listed.text.splitlines()[1:]] == [[job_id, "echo", "SUCCEEDED"]]


def test_json_output_is_the_proto_json_form(api: str) -> None:
    submitted = json.loads(jobsctl(api, "--output", "json", "submit", "echo", "--payload", "hi", "--label", "a=1").text)
    assert submitted["created"] is True
    assert submitted["job"]["state"] == "JOB_STATE_PENDING"
    assert submitted["job"]["labels"] == {"a": "1"}

    page = json.loads(jobsctl(api, "-o", "json", "list", "--label", "a=1").text)
    assert [job["job_id"] for job in page["jobs"]] == [submitted["job"]["job_id"]]


def test_same_idempotency_key_gives_the_same_job_and_a_different_request_is_refused(api: str) -> None:
    first = jobsctl(api, "submit", "echo", "--payload", "x", "--idempotency-key", "order-7")
    again = jobsctl(api, "submit", "echo", "--payload", "x", "--idempotency-key", "order-7")
    assert (first.code, again.code) == (0, 0)
    assert first.text == again.text
    assert "already submitted" in again.stderr

    changed = jobsctl(api, "submit", "echo", "--payload", "y", "--idempotency-key", "order-7")
    assert changed.code == 1
    assert "ALREADY_EXISTS" in changed.stderr


def test_invalid_input_exits_2_and_names_each_field(api: str) -> None:
    run = jobsctl(api, "submit", "Not A Kind", "--priority", "5000")
    assert run.code == 2
    violations = [line.strip().split(":")[0] for line in run.stderr.splitlines() if line.startswith("  ")]
    assert violations == ["kind", "priority"]


def test_unknown_and_foreign_jobs_are_both_not_found(api: str) -> None:
    foreign = jobsctl(api, "submit", "echo", "--payload", "secret", tenant="globex").text.strip()
    for job_id in (str(uuid.uuid4()), foreign):
        run = jobsctl(api, "get", job_id, tenant="acme")
        assert run.code == 3, run.stderr
        assert "NOT_FOUND" in run.stderr
        assert foreign not in run.stderr


def test_result_before_success_is_a_failed_precondition(api: str) -> None:
    # No worker runs, so the job stays pending.
    job_id = jobsctl(api, "submit", "echo", "--payload", "later").text.strip()
    run = jobsctl(api, "result", job_id)
    assert (run.code, run.stdout) == (4, b"")
    assert "FAILED_PRECONDITION" in run.stderr


def test_waiting_for_a_result_gives_up_at_the_timeout(api: str) -> None:
    job_id = jobsctl(api, "submit", "echo", "--payload", "never run").text.strip()
    run = jobsctl(api, "--timeout", "1", "result", "--wait", job_id)
    assert run.code == 5, run.stderr


def test_an_api_that_does_not_answer_exits_5() -> None:
    run = jobsctl(f"127.0.0.1:{free_port()}", "--timeout", "2", "list")
    assert run.code == 5
    assert "UNAVAILABLE" in run.stderr or "DEADLINE_EXCEEDED" in run.stderr


def test_a_wrong_token_is_refused(api: str) -> None:
    run = jobsctl(api, "list", tenant="nobody")
    assert run.code == 1
    assert "UNAUTHENTICATED" in run.stderr
