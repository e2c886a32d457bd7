"""The Dockerfile, read without a container engine: its stages, user and command, and a rehearsal of its
install step (the same files, the same pip command) that proves the entry points import from the result."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
BASE_IMAGE = "python:3.11-slim"
ENTRY_MODULES = ("api_service.__main__", "worker_service.__main__", "jobsctl.__main__")

pytestmark = pytest.mark.timeout(120)


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    joined, pending = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in joined]


def _stages() -> list[Stage]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, arguments in _instructions(DOCKERFILE.read_text()):
        if keyword == "ARG" and not stages:
            name, _, default = arguments.partition("=")
            args[name] = default
        elif keyword == "FROM":
            base, _, name = arguments.partition(" AS ")
            for arg, value in args.items():
                base = base.replace("${" + arg + "}", value)
            stages.append(Stage(base.strip(), name.strip()))
        else:
            stages[-1].instructions.append((keyword, arguments))
    return stages


def test_two_stages_on_the_slim_python_image() -> None:
    stages = _stages()
    assert [s.name for s in stages] == ["build", "runtime"]
    assert {s.base for s in stages} == {BASE_IMAGE}
    required = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert required == ">=3.11" and BASE_IMAGE.startswith("python:3.11")


def test_runtime_stage_holds_only_the_installed_venv_and_runs_as_a_numeric_non_root_user() -> None:
    runtime = _stages()[-1]
    assert runtime.all("COPY") == ["--from=build /opt/jobs /opt/jobs"]
    (user,) = runtime.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    assert [kw for kw, _ in runtime.instructions].index("USER") > [kw for kw, _ in runtime.instructions].index("RUN")


def test_default_command_is_the_api_and_it_listens_beyond_loopback() -> None:
    runtime = _stages()[-1]
    (command,) = runtime.all("CMD")
    assert json.loads(command) == ["python", "-m", "api_service"]
    assert runtime.all("ENTRYPOINT") == []
    env = " ".join(runtime.all("ENV"))
    assert "JOBS_API_LISTEN=0.0.0.0:50051" in env and "PATH=/opt/jobs/bin:$PATH" in env
    assert runtime.all("EXPOSE") == ["50051 9464"]


def _copied_sources() -> list[str]:
    sources = []
    for arguments in _stages()[0].all("COPY"):
        *paths, _destination = arguments.split()
        sources += paths
    return sources


def _ignored(relative: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: later lines win, '!' re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern.lstrip("!").rstrip("/")
        parts = Path(relative).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, bare) or fnmatch.fnmatch(p, bare.removeprefix("**/")) for p in prefixes) or (
            bare.startswith("**/") and any(fnmatch.fnmatch(part, bare[3:]) for part in parts)
        ):
            ignored = not negate
    return ignored


def _dockerignore() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_build_copies_every_package_pyproject_installs_and_the_context_keeps_them() -> None:
    packages = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {packages["package-dir"].get(p.split(".")[0], p.split(".")[0]).split("/")[0] for p in packages["packages"]}
    sources = _copied_sources()
    assert roots <= set(sources), f"not copied into the image: {roots - set(sources)}"
    patterns = _dockerignore()
    for source in sources:
        assert (REPO_ROOT / source).exists(), source
        assert not _ignored(source, patterns), f".dockerignore drops {source}"
    kept_out = (".venv/bin/python", ".dev/tokens.toml", ".git/HEAD", "tests/conftest.py", "shared/__pycache__/x.pyc")
    for excluded in kept_out:
        assert _ignored(excluded, patterns), f".dockerignore lets {excluded} into the build context"


def test_the_install_step_yields_importable_entry_points(tmp_path: Path) -> None:
    """Rebuilds what the build stage installs, from only the files it copies, offline."""
    context = tmp_path / "context"
    patterns = _dockerignore()
    for source in _copied_sources():
        origin = REPO_ROOT / source
        if origin.is_file():
            context.mkdir(exist_ok=True)
            shutil.copy2(origin, context / source)
            continue
        for path in origin.rglob("*"):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if path.is_file() and not _ignored(relative, patterns):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, context / relative)
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(wheels),
         ".", "./sdk/python"],
        cwd=context, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    installed = tmp_path / "site"
    names: set[str] = set()
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names |= set(archive.namelist())
            archive.extractall(installed)
    assert {"shared/storage/migrations/0001_jobs.sql", "shared/storage/sql/jobs.sql", "jobs/v1/jobs.proto"} <= names
    assert {"durable_jobs/py.typed", "durable_jobs/_proto/jobs/v1/jobs_pb2.pyi"} <= names
    probe = "; ".join(
        f"import {m}; assert {m}.__file__.startswith({str(installed)!r})" for m in (*ENTRY_MODULES, "durable_jobs")
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe + "; from shared.storage.migrator import available_migrations as m; assert m()"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr


EXAMPLE_HANDLERS = REPO_ROOT / "deploy" / "examples" / "handlers"


def test_the_example_handler_image_builds_on_ours_and_runs_only_the_worker() -> None:
    instructions = _instructions((EXAMPLE_HANDLERS / "Dockerfile").read_text())
    assert instructions[0] == ("ARG", "JOBS_IMAGE=durable-jobs:0.1.0")
    assert ("FROM", "${JOBS_IMAGE}") in instructions
    assert ("ENV", "JOBS_HANDLER_MODULES=example_handlers") in instructions
    assert instructions[-1] == ("CMD", '["python", "-m", "worker_service"]')
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users[-1] == "10001:10001", "the image runs as the same non-root user as ours"


def test_the_example_handler_package_installs_and_its_kinds_load(tmp_path: Path) -> None:
    """The Dockerfile's pip step, rehearsed: the package installs, and a worker's loader finds its kinds."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE_HANDLERS)],
        check=True, capture_output=True, timeout=90,
    )  # fmt: skip
    script = (
        "from shared.handlers.loader import load_registry\n"
        "r = load_registry(['example_handlers'])\n"
        "print(sorted(k for k in r.kinds() if k.startswith('example.')), r.get('example.digest').executor.value,"
        " r.get('example.thumbnail').policy.limit_keys)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO_ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        "['example.digest', 'example.document', 'example.thumbnail'] process ('provider:images',)"
    )


def test_the_example_document_pipeline_resumes_after_its_checkpointed_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 2 starts with attempt 1's first two stages checkpointed: it never reads the upload again."""
    monkeypatch.syspath_prepend(str(EXAMPLE_HANDLERS))
    from example_handlers.documents import kinds  # type: ignore[import-not-found]  # on the path from here on

    from shared.handlers import HandlerRegistry
    from shared.handlers.testing import MemoryProgress, context_for

    registry = HandlerRegistry()
    kinds.register(registry)
    spec = registry.get("example.document")
    assert spec is not None
    process_document = spec.handler

    upload = tmp_path / "upload.txt"
    upload.write_text("first paragraph\n\nsecond paragraph")
    payload = json.dumps({"upload": str(upload), "store": str(tmp_path / "store")}).encode()
    first = context_for(payload, attempt=1)
    process_document(first)
    upload.unlink()  # a stage that ran again would fail PERMANENT now
    done = {stage: first.checkpoints[stage].json() for stage in ("upload_check", "extract_text")}
    second = context_for(payload, attempt=2, checkpoints=done)
    result = json.loads(process_document(second))  # type: ignore[arg-type]  # a plain def: bytes
    assert result["upload_check"] == done["upload_check"] and result["embeddings"]["count"] == 2
    assert [stage for stage, c in second.checkpoints.items() if c.attempt == 2] == ["embeddings", "publish_index"]
    assert isinstance(second.progress_sink, MemoryProgress)
    assert second.progress_sink.reports[-1] == (1.0, "publish_index")
