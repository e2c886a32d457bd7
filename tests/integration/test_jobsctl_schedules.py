"""`jobsctl schedules …` as a user runs it, against the API (in this process) and its scheduler."""

from __future__ import annotations

import json

import pytest

from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = pytest.mark.timeout(180)


def test_schedules_create_list_pause_trigger_resume_delete(service_stack: ServiceStack):
    service_stack.start_api(JOBS_SCHEDULER_POLL_SECONDS="0.1")
    target = service_stack.api_target
    created = jobsctl(
        target, "schedules", "create", "ticker", "--cron", "* * * * * *", "--time-zone", "Europe/Berlin",
        "--kind", "echo", "--payload", "hi", "--overlap", "allow", "--catch-up-window", "30",
    )  # fmt: skip
    assert created.code == 0, created.stderr
    assert "Europe/Berlin" in created.text and "allow" in created.text
    # Every second, on purpose here; a seconds-first reader would have meant once a minute.
    assert "warning: six fields take seconds LAST here" in created.stderr

    def fired() -> dict | None:
        shown = json.loads(jobsctl(target, "schedules", "get", "ticker", "-o", "json").text)
        return shown if int(shown["fires_submitted"]) >= 2 else None

    assert wait_until(fired, timeout=60, what="two fires")["last_job_id"]
    assert jobsctl(target, "schedules", "pause", "ticker", "--note", "deploy").code == 0
    listed = jobsctl(target, "schedules", "list")
    assert listed.code == 0 and "ticker" in listed.text and "yes" in listed.text
    triggered = jobsctl(target, "schedules", "trigger", "ticker")
    assert triggered.code == 0, triggered.stderr
    job = json.loads(jobsctl(target, "get", triggered.text.strip(), "-o", "json").text)
    assert job["kind"] == "echo" and ":manual:" in job["idempotency_key"]
    assert jobsctl(target, "schedules", "resume", "ticker").code == 0
    assert jobsctl(target, "schedules", "delete", "ticker").code == 0
    gone = jobsctl(target, "schedules", "get", "ticker")
    assert gone.code == 3, gone.stderr
    bad = jobsctl(
        target, "schedules", "create", "bad", "--cron", "0 3 * * *", "--time-zone", "Nowhere/City", "--kind", "echo"
    )
    assert bad.code == 2 and "time_zone" in bad.stderr
