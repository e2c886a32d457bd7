"""Tombstones, delivery sets and dependency results through the API and workers (in this process) and
`jobsctl`: what a user types and sees."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.jobsctl_process import CliRun, jobsctl
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = pytest.mark.timeout(180)

TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}
SETTLE_SECONDS = 60
LONG_SLEEP = '{"seconds": 120}'


def _ok(run: CliRun) -> str:
    assert run.code == 0, run.stderr
    return run.text


def _shown(api: str, *args: str) -> str:
    """Runs jobsctl and prints the command with its output, as a transcript."""
    run = jobsctl(api, *args)
    print(f"$ jobsctl {shlex.join(args)}\n{run.text}{run.stderr}(exit {run.code})")
    return _ok(run)


def _state(api: str, job_id: str) -> str:
    return str(json.loads(_ok(jobsctl(api, "--output", "json", "get", job_id)))["state"])


def _set(api: str, key: str, version: int) -> dict:
    found: dict = json.loads(_ok(jobsctl(api, "--output", "json", "sets", "show", key, "--version", str(version))))
    return found


def test_a_deleted_resources_running_job_stops_like_a_cancel_and_its_versions_stay_deleted(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    api = service_stack.api_target
    service_stack.start_worker("w1")
    job_id = _ok(jobsctl(api, "submit", "sleep", "--payload", LONG_SLEEP, "--resource-key", "doc-1",
                         "--resource-version", "1")).strip()  # fmt: skip
    wait_until(lambda: _state(api, job_id) == "JOB_STATE_RUNNING", timeout=SETTLE_SECONDS, what="the job to run")

    deleted = _shown(api, "resources", "delete", "doc-1", "--reason", "the document was removed")

    assert deleted.strip() == "doc-1 deleted up to version 1: 1 jobs cancelled, 0 results removed"
    watched = jobsctl(api, "watch", job_id)
    assert watched.code == 7, watched.stderr  # CANCELLED, without waiting out the 120 s sleep
    assert jobsctl(api, "latest", "doc-1").code == 3
    refused = jobsctl(api, "submit", "echo", "--resource-key", "doc-1", "--resource-version", "1")
    assert refused.code == 4 and "RESOURCE_DELETED" in refused.stderr
    revived = _ok(jobsctl(api, "submit", "echo", "--payload", "v2", "--resource-key", "doc-1",
                          "--resource-version", "2")).strip()  # fmt: skip
    assert jobsctl(api, "watch", revived).code == 0
    assert _ok(jobsctl(api, "latest", "doc-1")) == "v2"
    events = _ok(jobsctl(api, "events", job_id))
    assert "resource deleted: the document was removed" in events and "tenant:acme" in events


def test_a_delivery_set_superseded_by_a_newer_version_answers_only_the_new_complete_set(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    api = service_stack.api_target
    service_stack.start_worker("w1", **TEST_HANDLERS)
    _shown(api, "sets", "submit", "lesson-7", "7", "--member", f"text=sleep:{LONG_SLEEP}",
           "--member", f"image=sleep:{LONG_SLEEP}", "--member", "audio=echo:audio v7",
           "--fan-in", "gather:")  # fmt: skip
    seven = _set(api, "lesson-7", 7)
    wait_until(
        lambda: all(_state(api, m["job"]["job_id"]) != "JOB_STATE_PENDING" for m in seven["members"]),
        timeout=SETTLE_SECONDS,
        what="version 7's members to start",
    )

    _shown(api, "sets", "submit", "lesson-7", "8", "--member", "text=echo:text v8", "--member", "image=echo:image v8",
           "--member", "audio=echo:audio v8", "--fan-in", "gather:")  # fmt: skip
    old = _shown(api, "sets", "show", "lesson-7", "--version", "7")
    assert "version 7  SUPERSEDED" in old.splitlines()[0]
    eight = _set(api, "lesson-7", 8)
    fan_in = eight["fan_in"]["job_id"]
    assert jobsctl(api, "watch", fan_in).code == 0
    latest = _shown(api, "sets", "latest", "lesson-7")

    assert "version 8  COMPLETE" in latest.splitlines()[0]
    assert "v7" not in latest, "the latest set never shows an older version's result"
    gathered = json.loads(_ok(jobsctl(api, "result", fan_in)))
    assert sorted(gathered.values()) == ["audio v8", "image v8", "text v8"]
    for member in _set(api, "lesson-7", 7)["members"]:
        assert member["job"]["state"] in {"JOB_STATE_SUPERSEDED", "JOB_STATE_SUCCEEDED"}


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_plain_handlers_in_a_thread_or_a_process_read_their_dependencies_results(
    service_stack: ServiceStack, executor: str
) -> None:
    service_stack.start_api()
    api = service_stack.api_target
    service_stack.start_worker("w1", **TEST_HANDLERS)
    _ok(jobsctl(api, "sets", "submit", "doc-1", "1", "--member", "text=echo:text v1", "--member", "image=echo:image v1",
                "--fan-in", f"gather.{executor}:"))  # fmt: skip
    fan_in = _set(api, "doc-1", 1)["fan_in"]["job_id"]
    assert jobsctl(api, "watch", fan_in).code == 0
    assert _state(api, fan_in) == "JOB_STATE_SUCCEEDED"
    gathered = json.loads(_ok(jobsctl(api, "result", fan_in)))
    assert sorted(gathered.values()) == ["image v1", "text v1"]
