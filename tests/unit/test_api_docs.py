"""docs/API.md is what scripts/api_docs.py generates from the .proto files, and covers every RPC,
message and enum the generated stubs know."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobs.v1 import jobs_pb2, worker_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
API_DOC = REPO_ROOT / "docs" / "API.md"

pytestmark = pytest.mark.timeout(60)


def test_committed_api_reference_equals_a_fresh_generation() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "api_docs.py"), "-"],
        capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == API_DOC.read_text(), "docs/API.md is stale: run `make generate` and commit it"


def test_api_reference_covers_every_rpc_message_and_enum() -> None:
    text = API_DOC.read_text()
    for file in (jobs_pb2.DESCRIPTOR, worker_pb2.DESCRIPTOR):
        for service in file.services_by_name.values():
            assert f"### {service.full_name}\n" in text
            for method in service.methods:
                assert f"| `{method.name}` |" in text, method.full_name
        for name, message in file.message_types_by_name.items():
            assert f"### {name}\n" in text
            for field in message.fields:
                assert f"| `{field.name}` | {field.number} |" in text, f"{name}.{field.name}"
        for name, enum in file.enum_types_by_name.items():
            assert f"### {name}\n" in text
            for value in enum.values:
                assert f"| `{value.name}` | {value.number} |" in text


def test_every_rpc_is_described() -> None:
    services = API_DOC.read_text().split("## Services\n", 1)[1].split("## Messages\n", 1)[0]
    rows = [line for line in services.splitlines() if line.startswith("| `")]
    assert rows
    undocumented = [row.split("`")[1] for row in rows if row.rstrip().endswith("| - |")]
    assert undocumented == [], "add a comment above these rpc lines in the .proto"
