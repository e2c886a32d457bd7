"""`jobsctl` (its main) against the API and a worker in this process: outputs and exit codes as a user sees them."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceStack, free_port

pytestmark = pytest.mark.timeout(120)


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
    assert run.stderr.count("priority") == 1, f"each violation once:\n{run.stderr}"


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


def test_global_options_work_after_the_command(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1")
    job_id = jobsctl(api, "submit", "echo", "--payload", "after").text.strip()
    run = jobsctl(api, "result", "--wait", "--timeout", "20", job_id)
    assert (run.code, run.stdout) == (0, b"after"), run.stderr
    shown = json.loads(jobsctl(api, "get", job_id, "-o", "json").text)
    assert shown["state"] == "JOB_STATE_SUCCEEDED"


def test_submit_flags_reach_the_job(api: str) -> None:
    dependency = jobsctl(api, "submit", "echo", "--payload", "first").text.strip()
    run = jobsctl(
        api, "-o", "json", "submit", "echo", "--payload", "second",
        "--run-after", "2h", "--deadline", "2099-01-01T00:00:00Z", "--depends-on", dependency,
        "--resource-key", "doc-9", "--resource-version", "2",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    job = json.loads(run.text)["job"]
    assert job["state"] == "JOB_STATE_BLOCKED"
    assert job["depends_on"] == [dependency]
    assert job["deadline"] == "2099-01-01T00:00:00Z"
    assert job["run_after"] > job["created_at"]
    assert (job["resource_key"], job["resource_version"]) == ("doc-9", "2")


def test_dedupe_by_input_attaches_an_identical_submission(api: str) -> None:
    first = jobsctl(api, "submit", "echo", "--payload", "same", "--dedupe-by-input")
    second = jobsctl(api, "submit", "echo", "--payload", "same", "--dedupe-by-input")
    assert (first.code, second.code) == (0, 0), second.stderr
    assert first.text == second.text
    assert "already submitted earlier" in second.stderr
    both = jobsctl(api, "submit", "echo", "--dedupe-by-input", "--idempotency-key", "k")
    assert both.code == 2
    assert "dedupe_by_input: cannot be combined with idempotency_key" in both.stderr


def test_submit_batch_prints_the_ids_in_file_order(api: str, tmp_path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"kind": "echo", "idempotency_key": f"batch-{n}", "labels": {"n": str(n)}}) + "\n"
            for n in range(5)
        )
    )
    run = jobsctl(api, "submit-batch", str(path), "--chunk-size", "2")
    assert run.code == 0, run.stderr
    ids = run.text.split()
    assert len(ids) == 5 and len(set(ids)) == 5
    for n, job_id in enumerate(ids):
        assert json.loads(jobsctl(api, "-o", "json", "get", job_id).text)["labels"] == {"n": str(n)}
    assert "5 jobs: 5 submitted" in run.stderr
    again = jobsctl(api, "submit-batch", str(path))
    assert (again.code, again.text.split()) == (0, ids), "the same file again: the same jobs"
    assert "5 already submitted earlier" in again.stderr


def test_submit_batch_is_all_or_nothing_per_chunk(api: str, tmp_path) -> None:
    path = tmp_path / "jobs.jsonl"
    lines = [{"kind": "echo", "labels": {"batch": "b"}}] * 3 + [{"kind": "no-such-kind", "labels": {"batch": "b"}}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    run = jobsctl(api, "submit-batch", str(path), "--chunk-size", "2")
    assert run.code == 2
    assert len(run.text.split()) == 2, "the first chunk went in"
    assert "  line 4: kind: is not a registered job kind" in run.stderr
    assert "lines 3-4 were not submitted" in run.stderr
    listed = json.loads(jobsctl(api, "-o", "json", "list", "--label", "batch=b").text)
    assert sorted(job["job_id"] for job in listed["jobs"]) == sorted(run.text.split()), "line 3 was not written"


def test_latest_writes_the_result_of_the_highest_version(service_stack: ServiceStack, api: str) -> None:
    for version in ("1", "2"):
        submitted = jobsctl(
            api, "submit", "echo", "--payload", f"v{version}", "--resource-key", "doc", "--resource-version", version
        )
        assert submitted.code == 0, submitted.stderr
    not_yet = jobsctl(api, "latest", "doc")
    assert not_yet.code == 4, not_yet.stderr
    assert "version 2 has no result yet" in not_yet.stderr
    service_stack.start_worker("w1")
    job_id = submitted.text.strip()
    assert jobsctl(api, "result", "--wait", job_id).code == 0
    latest = jobsctl(api, "latest", "doc")
    assert (latest.code, latest.stdout) == (0, b"v2"), latest.stderr
    assert f"doc version 2: job {job_id}" in latest.stderr
    assert json.loads(jobsctl(api, "-o", "json", "latest", "doc").text)["resource_version"] == "2"
    assert jobsctl(api, "latest", "no-such-doc").code == 3


def test_a_malformed_job_id_exits_with_the_not_found_code(api: str) -> None:
    for command in (["get", "not-a-job-id"], ["result", "x"], ["cancel", "12345"]):
        run = jobsctl(api, *command)
        assert run.code == 3, (command, run.stderr)
        assert "job_id" in run.stderr


def test_an_unknown_kind_is_refused_with_the_known_kinds_listed_once(api: str) -> None:
    run = jobsctl(api, "submit", "no-such-kind")
    assert run.code == 2
    assert run.stderr.count("is not a registered job kind") == 1, run.stderr
    assert run.stderr.splitlines() == [
        "jobsctl: error: INVALID_ARGUMENT",
        "  kind: is not a registered job kind; known kinds: echo, flaky, sleep, summarize",
    ]


def test_a_parents_children_are_listed_and_each_shows_its_parent(service_stack: ServiceStack, api: str) -> None:
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    parent = jobsctl(api, "submit", "fanout.async", "--payload", '{"pages": 2}').text.strip()
    result = jobsctl(api, "--timeout", "60", "result", "--wait", parent)
    assert result.code == 0, result.stderr
    spawned = json.loads(result.stdout)

    listed = jobsctl(api, "list", "--parent", parent)
    assert listed.code == 0, listed.stderr
    assert sorted(line.split()[0] for line in listed.text.splitlines()[1:]) == sorted(
        [*spawned["pages"], spawned["fan_in"]]
    )
    shown = jobsctl(api, "get", spawned["fan_in"]).text.splitlines()
    assert [line.split() for line in shown if line.startswith("parent_job_id")] == [["parent_job_id", parent]]
    assert jobsctl(api, "list", "--parent", parent, tenant="globex").text.splitlines()[1:] == []


def test_a_sequences_queue_is_listed_head_first_a_page_at_a_time(api: str) -> None:
    submitted = [jobsctl(api, "submit", "echo", "--sequence-key", "doc-7").text.strip() for _ in range(3)]
    jobsctl(api, "submit", "echo", "--sequence-key", "doc-7", tenant="globex")

    listed = jobsctl(api, "list", "--sequence", "doc-7")
    assert listed.code == 0, listed.stderr
    assert [line.split()[0] for line in listed.text.splitlines()[1:]] == submitted
    first = jobsctl(api, "list", "--sequence", "doc-7", "--page-size", "2")
    token = first.stderr.split("--page-token ")[1].strip()
    rest = jobsctl(api, "list", "--sequence", "doc-7", "--page-size", "2", "--page-token", token)
    pages = first.text.splitlines()[1:] + rest.text.splitlines()[1:]
    assert [line.split()[0] for line in pages] == submitted and "--page-token" not in rest.stderr
    assert jobsctl(api, "list", "--sequence", "no-such-sequence").text.splitlines()[1:] == []

    refused = jobsctl(api, "list", "--sequence", "k" * 257)
    assert refused.code == 2 and "sequence_key: must be at most 256 characters" in refused.stderr
