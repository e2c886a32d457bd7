"""deploy/k8s: each overlay renders with kustomize, every object validates strictly and offline, and what
the manifests promise (ports, probes, grace periods, autoscaling targets) agrees with the real settings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from api_service.health_monitor import LIVENESS_SERVICE
from api_service.settings import ApiSettings
from tests.deploy_crd_schemas import CRD_SCHEMAS
from tests.deploy_manifests import (
    RecordingEnv,
    config_map_data,
    container_env,
    exec_sleep_seconds,
    find,
    only_container,
    pod_spec,
    render,
    secret_data,
    walk,
)
from worker_service.settings import WorkerSettings

pytestmark = pytest.mark.timeout(120)

OVERLAYS = ("example", "example-hpa")
# The oldest and the newest Kubernetes minor versions the manifests are meant to apply to.
KUBERNETES_VERSIONS = ("1.29", "1.37")
EXPECTED_KINDS = {
    "example": {
        "Namespace", "ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment", "Job",
        "PodDisruptionBudget", "ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PodMonitor",
    },
    "example-hpa": {
        "Namespace", "ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment", "Job",
        "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor", "PodMonitor",
    },
}  # fmt: skip
# The contract's entry points (CONTRACT.md, "Processes and configuration").
ENTRY_POINTS = {
    "jobs-api": ["python", "-m", "api_service"],
    "jobs-worker": ["python", "-m", "worker_service"],
    "jobs-migrate": ["python", "-m", "api_service", "migrate"],
}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_strictly(overlay: str, version: str) -> None:
    manifests = render(overlay)
    assert {m["kind"] for m in manifests} == EXPECTED_KINDS[overlay]
    for manifest in manifests:
        what = f"{manifest['kind']}/{manifest['metadata']['name']}"
        crd_schema = CRD_SCHEMAS.get((manifest["apiVersion"], manifest["kind"]))
        try:
            if crd_schema is not None:
                jsonschema.Draft202012Validator(crd_schema).validate(manifest)
            else:
                kubernetes_validate.validate(manifest, version, strict=True)
        except jsonschema.ValidationError as exc:  # kubernetes_validate.ValidationError is one too
            where = "/".join(str(part) for part in exc.absolute_path)
            pytest.fail(f"{overlay}: {what} is invalid for Kubernetes {version} at {where}: {exc.message}")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_scaled_objects_hpa_behavior_is_a_valid_kubernetes_behavior(version: str) -> None:
    scaled = find(render("example"), "ScaledObject", "jobs-worker")
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    as_hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "behavior-check"},
        "spec": {
            "scaleTargetRef": scaled["spec"]["scaleTargetRef"],
            "maxReplicas": scaled["spec"]["maxReplicaCount"],
            "behavior": behavior,
        },
    }
    kubernetes_validate.validate(as_hpa, version, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_containers_run_the_contracts_entry_points(overlay: str) -> None:
    manifests = render(overlay)
    for name, command in ENTRY_POINTS.items():
        kind = "Job" if name == "jobs-migrate" else "Deployment"
        container = only_container(find(manifests, kind, name))
        assert container["command"] == command
        assert container.get("args") is None
        assert importlib.util.find_spec(f"{command[2]}.__main__") is not None
        assert container["image"] == "durable-jobs:0.1.0"


def _api(manifests):
    deployment = find(manifests, "Deployment", "jobs-api")
    return deployment, only_container(deployment)


def _worker(manifests):
    deployment = find(manifests, "Deployment", "jobs-worker")
    return deployment, only_container(deployment)


def _api_settings(manifests, tmp_path: Path) -> tuple[ApiSettings, RecordingEnv, dict[str, str]]:
    _, container = _api(manifests)
    env = container_env(manifests, container, "jobs-api-0")
    # The tokens file is a mounted Secret in the pod; here a stand-in file, as the settings insist on one.
    stand_in = tmp_path / "tokens.toml"
    stand_in.write_text("")
    recording = RecordingEnv({**env, "JOBS_TOKENS_FILE": str(stand_in)})
    return ApiSettings.from_env(recording), recording, env


def _worker_settings(manifests) -> tuple[WorkerSettings, RecordingEnv]:
    _, container = _worker(manifests)
    recording = RecordingEnv(container_env(manifests, container, "jobs-worker-0"))
    return WorkerSettings.from_env(recording), recording


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_set_is_one_the_settings_read(overlay: str, tmp_path: Path) -> None:
    manifests = render(overlay)
    _, api_read, api_env = _api_settings(manifests, tmp_path)
    _, worker_read = _worker_settings(manifests)
    assert set(api_env) - api_read.read == set(), "the API ignores these variables"
    assert set(worker_read) - worker_read.read == set(), "the worker ignores these variables"
    migrate_env = container_env(manifests, only_container(find(manifests, "Job", "jobs-migrate")), "migrate")
    assert set(migrate_env) == {"DATABASE_URL", "JOBS_LOG_LEVEL"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_workers_load_handler_modules(overlay: str, tmp_path: Path) -> None:
    manifests = render(overlay)
    api_settings, _, _ = _api_settings(manifests, tmp_path)
    assert api_settings.ignored_handler_modules == (), "the API learns kinds from the workers, never imports them"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_probes_tell_a_blocked_loop_and_an_unreachable_database(overlay: str) -> None:
    _, container = _worker(render(overlay))
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_probes_use_the_listen_port_and_distinct_health_services(overlay: str, tmp_path: Path) -> None:
    manifests = render(overlay)
    settings, _, _ = _api_settings(manifests, tmp_path)
    host, _, port = settings.listen.rpartition(":")
    assert host == "0.0.0.0", "the kubelet probes the pod IP, so the API must listen on every interface"
    _, container = _api(manifests)
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["grpc"] == int(port)
    probes = {kind: container[kind]["grpc"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert {probe["port"] for probe in probes.values()} == {int(port)}
    assert probes["readinessProbe"]["service"] == ""
    assert probes["livenessProbe"]["service"] == LIVENESS_SERVICE
    assert probes["startupProbe"]["service"] == LIVENESS_SERVICE


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_metrics_ports_match_the_metrics_listen_addresses(overlay: str, tmp_path: Path) -> None:
    manifests = render(overlay)
    api_settings, _, _ = _api_settings(manifests, tmp_path)
    worker_settings, _ = _worker_settings(manifests)
    pairs = ((_api(manifests)[1], api_settings.metrics_listen), (_worker(manifests)[1], worker_settings.metrics_listen))
    for container, listen in pairs:
        assert listen is not None and listen.startswith("0.0.0.0:")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == int(listen.rpartition(":")[2])
    service = find(manifests, "Service", "jobs-api")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"grpc": "grpc", "metrics": "metrics"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_reach_the_api_through_its_service(overlay: str) -> None:
    manifests = render(overlay)
    settings, _ = _worker_settings(manifests)
    host, _, port = settings.api_target.rpartition(":")
    service = find(manifests, "Service", host)
    assert int(port) in [p["port"] for p in service["spec"]["ports"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_grace_period_outlasts_pre_stop_drain_and_lease(overlay: str) -> None:
    manifests = render(overlay)
    settings, _ = _worker_settings(manifests)
    deployment, container = _worker(manifests)
    needed = exec_sleep_seconds(container) + settings.shutdown_grace_seconds + settings.lease_seconds
    assert exec_sleep_seconds(container) > 0, "the worker has a preStop hook"
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] > needed


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_grace_period_outlasts_pre_stop_and_call_drain(overlay: str, tmp_path: Path) -> None:
    manifests = render(overlay)
    settings, _, _ = _api_settings(manifests, tmp_path)
    deployment, container = _api(manifests)
    needed = exec_sleep_seconds(container) + settings.shutdown_grace_seconds
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] > needed


def test_keda_scales_one_replica_per_worker_concurrency_of_work() -> None:
    manifests = render("example")
    settings, _ = _worker_settings(manifests)
    scaled = find(manifests, "ScaledObject", "jobs-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "jobs-worker"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    assert float(trigger["metadata"]["targetQueryValue"]) == settings.concurrency
    assert "'pending', 'retry_wait'" in trigger["metadata"]["query"]
    auth = find(manifests, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] == "connection"
    assert secret_data(manifests, ref["name"])[ref["key"]].startswith("postgresql://")
    assert "replicas" not in find(manifests, "Deployment", "jobs-worker")["spec"], "the autoscaler owns replicas"


def test_the_plain_hpa_targets_the_same_work_per_replica() -> None:
    manifests = render("example-hpa")
    settings, _ = _worker_settings(manifests)
    hpa = find(manifests, "HorizontalPodAutoscaler", "jobs-worker")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "jobs-worker"
    external = next(m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External")
    assert float(external["target"]["averageValue"]) == settings.concurrency
    assert "replicas" not in find(manifests, "Deployment", "jobs-worker")["spec"], "the autoscaler owns replicas"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_names_a_rendered_object_and_key(overlay: str) -> None:
    manifests = render(overlay)
    names = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    for manifest in manifests:
        for key, value in walk(manifest):
            if key in ("configMapRef", "configMapKeyRef"):
                assert ("ConfigMap", value["name"]) in names
            elif key in ("secretRef", "secretKeyRef"):
                assert ("Secret", value["name"]) in names
            elif key == "secret" and isinstance(value, dict) and "secretName" in value:
                assert ("Secret", value["secretName"]) in names
            elif key == "serviceAccountName":
                assert ("ServiceAccount", value) in names
            if key == "secretKeyRef":
                assert value["key"] in secret_data(manifests, value["name"])
    # Only the API mounts the principals file, where JOBS_TOKENS_FILE says it is.
    _, container = _api(manifests)
    tokens_path = config_map_data(manifests, container["envFrom"][0]["configMapRef"]["name"])["JOBS_TOKENS_FILE"]
    mount = next(m for m in container["volumeMounts"] if tokens_path.startswith(m["mountPath"] + "/"))
    volumes = pod_spec(find(manifests, "Deployment", "jobs-api"))["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    assert Path(tokens_path).name in secret_data(manifests, volume["secret"]["secretName"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_select_the_pods_they_are_meant_for(overlay: str) -> None:
    manifests = render(overlay)
    pods = {
        component: find(manifests, "Deployment", f"jobs-{component}")["spec"]["template"]["metadata"]["labels"]
        for component in ("api", "worker")
    }

    def selects(selector: dict[str, str], component: str) -> bool:
        return selector.items() <= pods[component].items()

    for component in ("api", "worker"):
        deployment = find(manifests, "Deployment", f"jobs-{component}")
        assert selects(deployment["spec"]["selector"]["matchLabels"], component)
        pdb = find(manifests, "PodDisruptionBudget", f"jobs-{component}")
        assert selects(pdb["spec"]["selector"]["matchLabels"], component)
        other = "worker" if component == "api" else "api"
        assert not selects(pdb["spec"]["selector"]["matchLabels"], other)
    for name in ("jobs-api", "jobs-api-headless"):
        service = find(manifests, "Service", name)
        assert selects(service["spec"]["selector"], "api") and not selects(service["spec"]["selector"], "worker")
    pod_monitor = find(manifests, "PodMonitor", "jobs-worker")
    assert selects(pod_monitor["spec"]["selector"]["matchLabels"], "worker")
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    service_monitor = find(manifests, "ServiceMonitor", "jobs-api")
    wanted_labels = service_monitor["spec"]["selector"]["matchLabels"].items()
    wanted_port = service_monitor["spec"]["endpoints"][0]["port"]
    monitored = [
        m for m in manifests
        if m["kind"] == "Service" and wanted_labels <= m["metadata"]["labels"].items()
        and any(p["name"] == wanted_port for p in m["spec"]["ports"])
    ]  # fmt: skip
    assert [m["metadata"]["name"] for m in monitored] == ["jobs-api"], "each API pod is scraped once"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_non_root_read_only_and_bounded(overlay: str) -> None:
    manifests = render(overlay)
    for kind, name in (("Deployment", "jobs-api"), ("Deployment", "jobs-worker"), ("Job", "jobs-migrate")):
        workload = find(manifests, kind, name)
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["serviceAccountName"] == "durable-jobs"
        container = only_container(workload)
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        resources = container["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}, name
        if kind == "Deployment":
            scratch = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"]
            assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == scratch)
    account = find(manifests, "ServiceAccount", "durable-jobs")
    assert account["automountServiceAccountToken"] is False
