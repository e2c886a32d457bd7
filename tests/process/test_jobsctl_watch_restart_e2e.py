"""`jobsctl watch` across a SIGTERM and restart of the API process: it resumes from its last sequence."""

from __future__ import annotations

import signal

import pytest

from tests.integration.test_jobsctl_lifecycle import WATCH_TIMEOUT_SECONDS, _states, _submit
from tests.jobsctl_process import start_jobsctl
from tests.process_fixtures import ServiceStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def api(service_stack: ServiceStack) -> str:
    service_stack.start_api()
    return service_stack.api_target


def test_watch_resumes_from_its_last_sequence_when_the_api_restarts(service_stack: ServiceStack, api: str) -> None:
    job_id = _submit(api, "echo", "after the restart")
    watch = start_jobsctl(api, "watch", job_id)
    assert watch.stdout is not None
    first_line = watch.stdout.readline().decode()
    assert "PENDING" in first_line
    api_process = service_stack.processes[0]
    api_process.signal(signal.SIGTERM)
    api_process.popen.wait(timeout=20)
    service_stack.start_api()
    service_stack.start_worker("w1")
    out, err = watch.communicate(timeout=WATCH_TIMEOUT_SECONDS)
    assert watch.returncode == 0, err
    assert _states(first_line + out.decode()) == ["PENDING", "RUNNING", "SUCCEEDED"], "no repeats, no gaps"
