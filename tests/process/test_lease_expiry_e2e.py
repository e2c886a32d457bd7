"""A worker cut off from the API stops a handler once its lease has run out, and reports nothing."""

from __future__ import annotations

import json
import signal

import psycopg
import pytest

from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _running_owner(stack: ServiceStack, job_id: str) -> str | None:
    with psycopg.connect(stack.database_url) as conn:
        row = conn.execute("SELECT lease_owner FROM jobs WHERE job_id = %s AND state = 'running'", (job_id,)).fetchone()
    return row[0] if row else None


def test_a_handler_stops_when_its_lease_runs_out_while_the_api_does_not_answer(service_stack: ServiceStack) -> None:
    api = service_stack.start_api()
    worker = service_stack.start_worker("cut-off", JOBS_WORKER_CONCURRENCY="1")
    client = service_stack.tenant("acme")
    job_id = client.submit("sleep", json.dumps({"seconds": 600}).encode()).job.job_id
    wait_until(lambda: _running_owner(service_stack, job_id) == "cut-off", timeout=15, what="the job to run")

    api.signal(signal.SIGSTOP)  # the API hangs: heartbeats get no answer, and nothing refuses them
    try:
        wait_until(
            lambda: "stopped: lease expired" in worker.log_text(),
            timeout=30,
            what="the handler to stop once the 2s lease ran out",
        )
        assert worker.metric_value("jobs_leases_lost_total") == 1
        assert worker.metric_value("jobs_completed_total", {"outcome": "lease_lost"}) == 1
        assert "report refused" not in worker.log_text()
    finally:
        api.signal(signal.SIGCONT)
    wait_until(lambda: service_stack.health() == "SERVING", timeout=15, what="the API to answer again")
    # The stopped attempt sent no report: no report was refused. (A heartbeat that waited in the socket
    # while the API was stopped may arrive after the sweep and be told the lease is gone; that is no report.)
    refused_reports = [
        line
        for line in api.log_text().splitlines()
        if any(f"{r} refused" in line for r in ("completion", "failure", "release"))
    ]
    assert refused_reports == []
