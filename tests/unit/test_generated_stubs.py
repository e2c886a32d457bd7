"""The committed stubs and descriptor set in proto/jobs/v1, and the SDK's copy of the stubs, are exactly
what `make generate` produces from the .proto files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
STUB_DIR = REPO_ROOT / "proto" / "jobs" / "v1"
SDK_STUB_DIR = REPO_ROOT / "sdk" / "python" / "durable_jobs" / "_proto" / "jobs" / "v1"
GENERATED_PATTERNS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py", "*.binpb")

pytestmark = pytest.mark.timeout(60)


def _generated_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for pattern in GENERATED_PATTERNS for path in directory.glob(pattern)}


def test_committed_stubs_equal_a_fresh_regeneration(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "generate_stubs.sh"), str(tmp_path), str(tmp_path / "sdk")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, f"generate_stubs.sh failed:\n{done.stderr}"
    fresh = _generated_files(tmp_path / "jobs" / "v1")
    committed = _generated_files(STUB_DIR)
    fresh |= {f"sdk/{name}": data for name, data in _generated_files(tmp_path / "sdk" / "jobs" / "v1").items()}
    committed |= {f"sdk/{name}": data for name, data in _generated_files(SDK_STUB_DIR).items()}

    assert fresh, "the generator produced no stubs"
    assert sorted(fresh) == sorted(committed), "generated and committed stub files differ in name"
    stale = [name for name in sorted(fresh) if fresh[name] != committed[name]]
    assert not stale, f"stale stubs (run `make generate` and commit): {', '.join(stale)}"
