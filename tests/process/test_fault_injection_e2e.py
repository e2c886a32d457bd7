"""JOBS_FAULT_INJECTION in the real processes: with a fraction of their statements failing on purpose,
the API and the workers keep every promise to clients that resubmit indeterminate answers."""

from __future__ import annotations

import threading
import time

import pytest

from tests.acknowledged_load import OPEN_JOBS, Ledger, audit, client_loop, count
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LOAD_SECONDS = 30.0


def test_with_statements_failing_on_purpose_every_acknowledged_job_runs_and_publishes_once(
    service_stack: ServiceStack,
) -> None:
    """The API and two workers from their entry points with JOBS_FAULT_INJECTION on (5%, well above the
    chaos run's 1%): clients resubmit indeterminate answers with their keys, as the contract says, and
    every acknowledged job exists once, succeeds, and has one result; both kinds of fault struck in
    every process."""
    faults = {"JOBS_FAULT_INJECTION": "0.05"}
    api = service_stack.start_api(**faults)
    workers = [service_stack.start_worker(name, JOBS_WORKER_CONCURRENCY="4", **faults) for name in ("w1", "w2")]
    ledger = Ledger()
    stop_at = time.monotonic() + LOAD_SECONDS
    clients = [
        threading.Thread(target=client_loop, args=(service_stack, i, lambda: time.monotonic() < stop_at, ledger, 0.02))
        for i in range(3)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(LOAD_SECONDS + 120)
        assert not client.is_alive()
    wait_until(
        lambda: count(service_stack.database_url, OPEN_JOBS) == 0, timeout=120, interval=0.5, what="every job to end"
    )
    found = audit(service_stack.database_url, ledger)
    assert ledger.unexpected == []
    assert len(ledger.acknowledged) > 100 and ledger.retries > 0
    assert found.lost == [] and found.not_succeeded == []
    assert found.published_twice == 0 and found.results == found.succeeded
    for process in [api, *workers]:
        log = process.log_text()
        assert "injected fault: statement_not_sent" in log and "injected fault: commit_reply_lost" in log, process.name
