"""A real Prometheus (Debian's package, `make system-deps`) for the end-to-end tests: it scrapes the
real processes every second with the shipped rules, and answers PromQL over its HTTP API. A missing
binary fails the test rather than skipping it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.process_fixtures import ServiceProcess, free_port, wait_until

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "rules.yaml"
# Shorter than anything a deployment would use, so a test sees scrapes and rule results in seconds.
SCRAPE_AND_EVALUATION_INTERVAL = "1s"
SCRAPE_INTERVAL_SECONDS = 1.0
PROMETHEUS_READY_TIMEOUT_SECONDS = 20.0


@dataclass
class PrometheusServer:
    popen: subprocess.Popen
    port: int
    log_path: Path

    def _get(self, path: str, **params: str | float) -> dict | list:
        url = f"http://127.0.0.1:{self.port}{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """The instant vector a query returns now (or at `at`), as Prometheus's HTTP API answers it."""
        params: dict[str, str | float] = {"query": promql}
        if at is not None:
            params["time"] = at
        data = self._get("/api/v1/query", **params)
        assert isinstance(data, dict)
        return data["result"]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        """What a graph panel draws: the expression at every step from start to end."""
        data = self._get("/api/v1/query_range", query=promql, start=start, end=end, step=step)
        assert isinstance(data, dict)
        return data["result"]

    def query_exemplars(self, promql: str, start: float, end: float) -> list[dict]:
        """The exemplars of the series an expression selects, as Grafana asks for them."""
        data = self._get("/api/v1/query_exemplars", query=promql, start=start, end=end)
        assert isinstance(data, list)
        return data

    def label_values(self, variable_query: str) -> set[str]:
        """A Grafana variable's options: `label_values(selector, label)` as Grafana asks Prometheus for it."""
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", variable_query, re.DOTALL)
        assert match, variable_query
        data = self._get(f"/api/v1/label/{match[2]}/values", **{"match[]": match[1]})
        assert isinstance(data, list)
        return set(data)

    def values_by(self, promql: str, label: str) -> dict[str, float]:
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in self.query(promql)}

    def ready(self) -> bool:
        if self.popen.poll() is not None:
            pytest.fail(f"prometheus exited with {self.popen.returncode}:\n{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def wait_for_evaluation_after(self, at: float, record: str) -> None:
        """Until the recording rule has been evaluated at least once after `at` (a Unix time)."""
        wait_until(
            lambda: any(float(s["value"][1]) > at for s in self.query(f"timestamp({record})")),
            timeout=15,
            interval=0.2,
            what=f"an evaluation of {record} after {at}",
        )


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator:
    """start(api, workers, exemplars=False): Prometheus scraping the API as job `jobs-api` and the
    workers as `jobs-worker`, as deploy/prometheus/prometheus.yml names them, with the shipped rules."""
    servers: list[PrometheusServer] = []

    def start(api: ServiceProcess | None, workers: list[ServiceProcess], exemplars: bool = False) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("the prometheus binary is not on PATH; install it with `make system-deps`")
        scrape_configs = [
            {
                "job_name": "jobs-worker",
                "static_configs": [{"targets": [f"127.0.0.1:{w.metrics_port}" for w in workers]}],
            }
        ]
        if api is not None:
            scrape_configs.append(
                {"job_name": "jobs-api", "static_configs": [{"targets": [f"127.0.0.1:{api.metrics_port}"]}]}
            )
        config = tmp_path / "prometheus.yml"
        # JSON is YAML: no YAML library needed to write Prometheus's configuration.
        config.write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": SCRAPE_AND_EVALUATION_INTERVAL,
                        "scrape_timeout": SCRAPE_AND_EVALUATION_INTERVAL,
                        "evaluation_interval": SCRAPE_AND_EVALUATION_INTERVAL,
                    },
                    "rule_files": [str(RULES)],
                    "scrape_configs": scrape_configs,
                }
            )
        )
        port = free_port()
        log_path = tmp_path / "prometheus.log"
        command = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        if exemplars:
            # As docs/METRICS.md tells operators: exemplars are kept only with this feature on.
            command.append("--enable-feature=exemplar-storage")
        with log_path.open("wb") as log_file:
            popen = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        server = PrometheusServer(popen, port, log_path)
        servers.append(server)
        wait_until(server.ready, timeout=PROMETHEUS_READY_TIMEOUT_SECONDS, interval=0.2, what="prometheus")
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.popen.terminate()
            try:
                server.popen.wait(10)
            except subprocess.TimeoutExpired:
                server.popen.kill()
                server.popen.wait()
