"""durable-jobs-sdk as a user gets it, in a fresh venv with nothing else: the wheel and the sdist build
from sdk/python, install offline, add `durable_jobs` and no other top-level name and no service code;
the docs' example package, which depends on the SDK alone, passes mypy --strict and its documented tests
there, runs on the service's workers, and is called from a separate program through durable_jobs.Client.

Offline: the SDK's dependencies come from .venv/sdk-wheelhouse (`make sdk-wheelhouse`, which `make test`
runs), at the versions the project's venv has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.doc_examples import write_doc_examples
from tests.process_fixtures import REPO_ROOT, ServiceStack, tenant_token

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SDK_SOURCE = REPO_ROOT / "sdk" / "python"
WHEELHOUSE = Path(os.environ.get("JOBS_SDK_WHEELHOUSE", REPO_ROOT / ".venv" / "sdk-wheelhouse"))
SDK_DIST_INFO = "durable_jobs_sdk-0.1.0.dist-info"
SERVICE_PACKAGES = ("shared", "jobs", "api_service", "worker_service", "jobsctl", "jobs_outbox")


def _run(command: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env() -> dict[str, str]:
    """This environment without what points into the project (its venv, its path)."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PIP_FIND_LINKS"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """The wheel and the sdist, built from a copy of sdk/python (no build output left in the tree)."""
    source, dist = tmp_path / "sdk-source", tmp_path / "dist"
    shutil.copytree(SDK_SOURCE, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dist), "."],
         source)  # fmt: skip
    _run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"], source)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return wheel, sdist


def _pip(venv_python: Path, *args: str, cwd: Path) -> None:
    """The project's pip, working on the fresh venv's interpreter, offline."""
    _run([sys.executable, "-m", "pip", "--python", str(venv_python), "--disable-pip-version-check", *args], cwd)


def test_a_users_handler_package_built_on_the_sdk_alone(service_stack: ServiceStack, tmp_path: Path) -> None:
    assert (WHEELHOUSE / "pytest-9.2.0-py3-none-any.whl").exists() or any(WHEELHOUSE.glob("grpcio-*.whl")), (
        f"no wheels in {WHEELHOUSE}: run `make sdk-wheelhouse`"
    )
    wheel, sdist = _build(tmp_path)

    # The wheel holds durable_jobs and its metadata only, typed, with the stubs it needs.
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert {name.split("/")[0] for name in names} == {"durable_jobs", SDK_DIST_INFO}
    assert {"durable_jobs/py.typed", "durable_jobs/_proto/jobs/v1/jobs_pb2.pyi"} <= set(names)
    assert not any(name.startswith("durable_jobs/_proto/jobs/v1/worker") for name in names)
    # The sdist holds the same files, and a wheel built from it (offline, build isolation) is the same.
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {name for name in names if not name.startswith(SDK_DIST_INFO)} <= in_sdist
    rebuilt = tmp_path / "rebuilt"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--find-links", str(WHEELHOUSE),
          "-w", str(rebuilt), str(sdist)], tmp_path)  # fmt: skip
    with zipfile.ZipFile(next(rebuilt.glob("*.whl"))) as archive:
        assert sorted(archive.namelist()) == sorted(names)

    # A fresh venv: the SDK, pytest, and the docs' example package, which names only the SDK.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    project = tmp_path / "my-jobs"
    write_doc_examples(project)
    links = ["--no-index", "--find-links", str(WHEELHOUSE), "--find-links", str(wheel.parent)]
    _pip(python, "install", "--quiet", *links, str(project), "pytest", cwd=tmp_path)

    # Installing added durable_jobs and nothing else of the service; importing it loads no gRPC.
    probe = (
        "import importlib.metadata as m, importlib.util as u, sys\n"
        "files = m.distribution('durable-jobs-sdk').files\n"
        "print(sorted({f.parts[0] for f in files}))\n"
        f"print([p for p in {SERVICE_PACKAGES!r} if u.find_spec(p)])\n"
        "import durable_jobs, my_jobs\n"
        "print('grpc' in sys.modules)\n"
    )
    lines = _run([str(python), "-c", probe], tmp_path).splitlines()
    assert lines == [str(["durable_jobs", SDK_DIST_INFO]), "[]", "False"]

    # Strict mypy on the package, its tests and the caller, reading the SDK's types from the fresh venv.
    mypy = [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python)]
    _run([*mypy, "--cache-dir", str(tmp_path / ".mypy_cache"), "my_jobs", "tests/test_my_jobs.py", "caller.py"],
         project)  # fmt: skip

    # The tests the docs show, with the documented helper, in the fresh venv.
    tested = _run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_my_jobs.py"], project)
    assert "4 passed" in tested

    # On the service's workers, with the package on their path as a worker image would have it installed.
    service_stack.start_api()
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="my_jobs", PYTHONPATH=str(project))

    # Called from a separate program in the fresh venv: no stub, no metadata, only durable_jobs.Client.
    caller_env = {**_clean_env(), "JOBS_API_TARGET": service_stack.api_target, "JOBS_TOKEN": tenant_token("acme")}
    printed = _run([str(python), "caller.py"], project, timeout=120, env=caller_env).splitlines()
    assert printed[0] == "{'invoice_id': 'A-1', 'total_cents': 450, 'currency': 'EUR'}"
    assert printed[1] == "attempt 1 INFO: invoice A-1 totals 450 cents"
    assert printed[2] == "is not a registered job kind"
