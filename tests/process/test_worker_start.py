"""A worker replica started while its database cannot be reached waits for it, not ready, and works once
it can: a transient outage at start-up is no reason to exit (found by the chaos run, where a worker
restarted during a PostgreSQL restart exited for good)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from chaos.fault_proxy import FaultProxy
from jobs.v1 import jobs_pb2
from tests.process_fixtures import ServiceStack, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_worker_started_during_a_database_outage_waits_and_then_works(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    parts = urlsplit(service_stack.database_url)
    port = free_port()
    # Nothing listens on `port` yet: every connection the worker tries is refused.
    unreachable = parts._replace(netloc=f"{parts.netloc.rpartition('@')[0]}@127.0.0.1:{port}").geturl()
    worker = service_stack.spawn_worker("w1", DATABASE_URL=unreachable)
    wait_until(
        lambda: worker.popen.poll() is not None or worker.log_text().count("publishing job kinds failed") >= 2,
        timeout=60,
        what="the worker to try its first publication again, or exit",
    )
    assert worker.popen.poll() is None, f"the worker exited:\n{worker.log_text()[-2000:]}"

    relay = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432, listen_port=port)
    try:
        wait_until(lambda: "worker w1:" in worker.log_text(), timeout=60, what="the worker to start working")
        client = service_stack.tenant("acme")
        job_id = client.submit("echo", b"after the outage").job.job_id
        wait_until(
            lambda: client.get(job_id).state == jobs_pb2.JOB_STATE_SUCCEEDED, timeout=30, what="the job to succeed"
        )
    finally:
        worker.stop()
        relay.close()
