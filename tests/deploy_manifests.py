"""Rendering the kustomize overlays and reading what the rendered objects ask of the processes."""

from __future__ import annotations

import base64
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
RENDER_TIMEOUT_SECONDS = 60

Manifest = dict[str, Any]


@functools.cache
def render(overlay: str) -> tuple[Manifest, ...]:
    """`kubectl kustomize` (kustomize v5, built into kubectl) on an overlay: no cluster, no network."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not on PATH: the deploy tests render the overlays with `kubectl kustomize`")
    done = subprocess.run(
        [kubectl, "kustomize", str(K8S_DIR / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_SECONDS,
        # No kubeconfig and no cluster are needed; an empty one proves it.
        env={**os.environ, "KUBECONFIG": os.devnull},
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"kubectl kustomize {overlay} failed:\n{done.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def find(manifests: tuple[Manifest, ...], kind: str, name: str) -> Manifest:
    """The one object of `kind` named `name`, or `name-<hash>` for what a generator made."""
    pattern = re.compile(re.escape(name) + r"(-[a-z0-9]{10})?")
    matches = [m for m in manifests if m["kind"] == kind and pattern.fullmatch(m["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name}, found {[m['metadata']['name'] for m in matches]}"
    return matches[0]


def pod_spec(workload: Manifest) -> Manifest:
    return workload["spec"]["template"]["spec"]


def only_container(workload: Manifest) -> Manifest:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: one container expected"
    return containers[0]


def config_map_data(manifests: tuple[Manifest, ...], name: str) -> dict[str, str]:
    return dict(_by_exact_name(manifests, "ConfigMap", name).get("data", {}))


def secret_data(manifests: tuple[Manifest, ...], name: str) -> dict[str, str]:
    secret = _by_exact_name(manifests, "Secret", name)
    decoded = {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}
    return {**decoded, **secret.get("stringData", {})}


def _by_exact_name(manifests: tuple[Manifest, ...], kind: str, name: str) -> Manifest:
    for manifest in manifests:
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
            return manifest
    raise AssertionError(f"{kind} {name} is referenced but not rendered")


def container_env(manifests: tuple[Manifest, ...], container: Manifest, pod_name: str) -> dict[str, str]:
    """The environment the container starts with, resolved the way the kubelet resolves it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_map_data(manifests, source["configMapRef"]["name"]))
        else:
            env.update(secret_data(manifests, source["secretRef"]["name"]))
    for variable in container.get("env", []):
        env[variable["name"]] = _env_value(manifests, variable, pod_name)
    return env


def _env_value(manifests: tuple[Manifest, ...], variable: Manifest, pod_name: str) -> str:
    if "value" in variable:
        return variable["value"]
    source = variable["valueFrom"]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        data = secret_data(manifests, ref["name"])
    elif "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        data = config_map_data(manifests, ref["name"])
    else:
        assert source["fieldRef"]["fieldPath"] == "metadata.name", source
        return pod_name
    assert ref["key"] in data, f"{variable['name']}: key {ref['key']} missing from {ref['name']}"
    return data[ref["key"]]


class RecordingEnv(dict):
    """An environment that notes every variable a settings class asks for."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a nested structure of dicts and lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def exec_sleep_seconds(container: Manifest) -> float:
    """The pause a container's preStop hook makes; 0 without one."""
    hook = container.get("lifecycle", {}).get("preStop")
    if hook is None:
        return 0.0
    command = hook["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, f"preStop must be a plain sleep, got {command}"
    return float(command[1])
