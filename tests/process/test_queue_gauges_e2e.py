"""The queue gauges across two real API processes: one exports, and the other takes over when it dies."""

from __future__ import annotations

import signal

import pytest

from tests.process_fixtures import ServiceProcess, free_port, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.mark.e2e
def test_of_two_api_processes_one_exports_and_the_other_takes_over_when_it_dies(service_stack) -> None:
    fast = {"JOBS_METRICS_REFRESH_SECONDS": "0.2"}
    apis = [
        service_stack.start_api(**fast),
        service_stack.start_api("api-2", JOBS_API_LISTEN=f"127.0.0.1:{free_port()}", **fast),
    ]
    service_stack.tenant("acme").submit("echo", b"no worker runs, so it stays pending")
    pending = {"tenant": "acme", "kind": "echo", "state": "pending"}

    def exporters() -> list[ServiceProcess]:
        return [api for api in apis if _exporting(api)]

    wait_until(lambda: all(_answering(api) for api in apis), timeout=20, what="both metrics endpoints")
    wait_until(
        lambda: len(exporters()) == 1 and exporters()[0].metric_value("jobs_queue_depth", pending) == 1,
        timeout=10,
        what="one replica to export the pending job",
    )
    (exporter,) = exporters()
    (standby,) = [api for api in apis if api is not exporter]
    assert "jobs_queue_depth{" not in standby.metrics_text()
    assert "jobs_metrics_snapshot_age_seconds" not in standby.metrics_text()

    exporter.signal(signal.SIGKILL)  # no clean shutdown: PostgreSQL frees the lock when the socket closes
    wait_until(
        lambda: exporters() == [standby] and standby.metric_value("jobs_queue_depth", pending) == 1,
        timeout=10,
        what="the other replica to take over",
    )


def _answering(api: ServiceProcess) -> bool:
    try:
        return "jobs_metrics_exporter" in api.metrics_text()
    except OSError:
        return False


def _exporting(api: ServiceProcess) -> bool:
    """False too while its metrics endpoint is not up yet (a replica is started without waiting)."""
    if api.popen.poll() is not None:
        return False
    try:
        return api.metric_value("jobs_metrics_exporter") == 1
    except OSError:
        return False
