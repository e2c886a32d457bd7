"""deploy/compose.yaml, read without a container engine: its commands are the contract's entry points, its
variables are the ones the settings read, its ports, hosts, tokens and grace periods line up, and the
files it mounts exist. Its health checks run against a real API, and promtool checks its Prometheus."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from api_service.health_monitor import READINESS_SERVICES
from api_service.settings import ApiSettings
from tests.deploy_manifests import RecordingEnv
from tests.process_fixtures import ServiceStack, wait_until
from worker_service.settings import WorkerSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "deploy" / "compose.yaml"
COMPOSE_DIR = COMPOSE_FILE.parent
ENTRY_POINTS = {
    "migrate": ["python", "-m", "api_service", "migrate"],
    "api": ["python", "-m", "api_service"],
    "worker-1": ["python", "-m", "worker_service"],
    "worker-2": ["python", "-m", "worker_service"],
}
WORKERS = ("worker-1", "worker-2")

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def _mounts(service: dict) -> dict[str, Path]:
    """Container path -> host path of each bind mount (named volumes left out)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            mounts[target] = (COMPOSE_DIR / source).resolve()
    return mounts


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_the_stack_is_postgres_migrations_api_two_workers_prometheus_and_grafana(services: dict) -> None:
    assert set(services) == {"postgres", "migrate", "api", "worker-1", "worker-2", "prometheus", "grafana"}
    assert services["postgres"]["image"] == "postgres:16"


def test_service_containers_are_built_from_the_dockerfile_and_run_the_entry_points(services: dict) -> None:
    for name, command in ENTRY_POINTS.items():
        service = services[name]
        assert (COMPOSE_DIR / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == (
            REPO_ROOT / "Dockerfile"
        )
        assert service["command"] == command, name
        assert "entrypoint" not in service


def _api_env(services: dict) -> dict[str, str]:
    env = dict(services["api"]["environment"])
    env["JOBS_TOKENS_FILE"] = str(_mounts(services["api"])[env["JOBS_TOKENS_FILE"]])
    return env


def test_every_variable_is_read_by_the_settings_and_loads(services: dict) -> None:
    api_env = RecordingEnv(_api_env(services))
    ApiSettings.from_env(api_env)
    assert set(api_env) - api_env.read == set()
    for name in WORKERS:
        worker_env = RecordingEnv(services[name]["environment"])
        WorkerSettings.from_env(worker_env)
        assert set(worker_env) - worker_env.read == set(), name
    assert set(services["migrate"]["environment"]) == {"DATABASE_URL"}


def test_only_workers_load_handler_modules(services: dict) -> None:
    assert ApiSettings.from_env(_api_env(services)).ignored_handler_modules == ()


def test_database_urls_point_at_the_postgres_service_with_its_credentials(services: dict) -> None:
    postgres = services["postgres"]["environment"]
    for name in ENTRY_POINTS:
        url = urlsplit(services[name]["environment"]["DATABASE_URL"])
        assert (url.hostname, url.port, url.path.lstrip("/")) == ("postgres", 5432, postgres["POSTGRES_DB"])
        assert (url.username, url.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])


def test_ports_follow_the_listen_addresses(services: dict) -> None:
    api = ApiSettings.from_env(_api_env(services))
    published = {int(p.split(":")[-1]): p for p in services["api"]["ports"]}
    assert api.metrics_listen is not None and api.console is not None
    assert set(published) == {_port(api.listen), _port(api.metrics_listen), _port(api.console.listen)}
    assert all(p.startswith("127.0.0.1:") for p in published.values()), "published on loopback only"
    for name in WORKERS:
        worker = WorkerSettings.from_env(services[name]["environment"])
        host, _, port = worker.api_target.rpartition(":")
        assert (host, int(port)) == ("api", _port(api.listen))


def test_workers_are_distinct_and_their_token_is_a_worker_principal(services: dict) -> None:
    ids = {services[name]["environment"]["JOBS_WORKER_ID"] for name in WORKERS}
    assert ids == set(WORKERS)
    principals = tomllib.loads(Path(_api_env(services)["JOBS_TOKENS_FILE"]).read_text())["principal"]
    workers = {p["token_sha256"] for p in principals if p.get("role") == "worker"}
    tenants = {p["tenant"]: p["token_sha256"] for p in principals if "tenant" in p}
    for name in WORKERS:
        token = services[name]["environment"]["JOBS_WORKER_TOKEN"]
        assert hashlib.sha256(token.encode()).hexdigest() in workers
    assert tenants["local"] == hashlib.sha256(b"local-tenant-token").hexdigest(), "the token the header names"
    assert "JOBS_TOKEN=local-tenant-token" in COMPOSE_FILE.read_text()


def test_start_order_waits_for_health_and_finished_migrations(services: dict) -> None:
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["migrate"]["restart"] == "no"
    assert services["api"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    for name in WORKERS:
        assert services[name]["depends_on"] == {"api": {"condition": "service_healthy"}}


def _seconds(duration: str) -> float:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return float(duration[:-1])


def test_stop_grace_periods_outlast_the_drains(services: dict) -> None:
    api = ApiSettings.from_env(_api_env(services))
    assert _seconds(services["api"]["stop_grace_period"]) > api.shutdown_grace_seconds
    for name in WORKERS:
        worker = WorkerSettings.from_env(services[name]["environment"])
        assert _seconds(services[name]["stop_grace_period"]) > worker.shutdown_grace_seconds + worker.lease_seconds


def _health_command(service: dict) -> list[str]:
    command = service["healthcheck"]["test"]
    assert command[:3] == ["CMD", "python", "-c"]
    return [sys.executable, "-c", command[3]]


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_health_checks_pass_against_the_real_processes(services: dict, service_stack: ServiceStack) -> None:
    assert "" in READINESS_SERVICES
    service_stack.start_api()
    worker = service_stack.start_worker("w1")
    api_env = {**os.environ, "JOBS_API_LISTEN": f"0.0.0.0:{service_stack.api_port}"}
    worker_env = {**os.environ, "JOBS_METRICS_LISTEN": f"0.0.0.0:{worker.metrics_port}"}
    api_check = _run(_health_command(services["api"]), api_env)
    assert api_check.returncode == 0, api_check.stderr
    # The worker's check is its readiness, which its first probe of the database and the API sets; the
    # compose file's retries give it that time, as this wait does.
    wait_until(
        lambda: _run(_health_command(services["worker-1"]), worker_env).returncode == 0,
        timeout=30,
        what="the worker's health check to pass",
    )
    service_stack.processes[0].stop()
    assert _run(_health_command(services["api"]), api_env).returncode != 0
    wait_until(
        lambda: _run(_health_command(services["worker-1"]), worker_env).returncode != 0,
        timeout=60,
        what="the worker's health check to fail without the API",
    )


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=20, check=False)


def test_prometheus_loads_the_shipped_rules_and_scrapes_every_service(services: dict, tmp_path: Path) -> None:
    mounts = _mounts(services["prometheus"])
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(config_path.read_text())
    assert [mounts[rule] for rule in config["rule_files"]] == [REPO_ROOT / "deploy" / "prometheus" / "rules.yaml"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    metrics_target = {
        name: f"{name}:{_port(services[name]['environment']['JOBS_METRICS_LISTEN'])}" for name in ("api", *WORKERS)
    }
    assert targets == {
        "jobs-api": [metrics_target["api"]],
        "jobs-worker": [metrics_target[name] for name in WORKERS],
    }
    shipped = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert set(targets) == {job["job_name"] for job in shipped["scrape_configs"]}, "the rules refer to these names"
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool comes with `make system-deps`"
    # The container's layout, rebuilt under tmp_path, so promtool resolves the rule file as Prometheus will.
    etc = tmp_path / "etc" / "prometheus"
    etc.mkdir(parents=True)
    for container_path, host_path in mounts.items():
        shutil.copy(host_path, tmp_path / container_path.lstrip("/"))
    local_config = etc / "prometheus.yml"
    local_config.write_text(config_path.read_text().replace("/etc/prometheus/", f"{etc}/"))
    checked = subprocess.run(
        [promtool, "check", "config", str(local_config)], capture_output=True, text=True, timeout=30, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_grafana_is_provisioned_with_prometheus_and_the_shipped_dashboard(services: dict) -> None:
    grafana = services["grafana"]
    mounts = _mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    url = urlsplit(datasource["url"])
    assert (datasource["type"], url.hostname, url.port) == ("prometheus", "prometheus", 9090)
    assert any(p.endswith(":9090") for p in services["prometheus"]["ports"])
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "durable-jobs.yaml").read_text())["providers"]
    dashboards = mounts[provider["options"]["path"]]
    assert dashboards == REPO_ROOT / "deploy" / "grafana" / "dashboards"
    assert sorted(p.name for p in dashboards.glob("*.json")), "the shipped dashboard is mounted"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (dashboards / Path(home).name).is_file() and home.startswith(provider["options"]["path"] + "/")
