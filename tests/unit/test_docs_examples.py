"""The handler and client examples of docs/HANDLERS.md and docs/CLIENT.md, run as written: the example
package's tests pass with the documented test helper, for every way of declaring a kind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_examples import doc_examples, write_doc_examples

pytestmark = pytest.mark.timeout(120)


def test_the_docs_hold_a_whole_package_its_tests_and_a_caller() -> None:
    examples = doc_examples()
    assert set(examples) == {"pyproject.toml", "my_jobs/__init__.py", "tests/test_my_jobs.py", "caller.py"}
    package = examples["my_jobs/__init__.py"]
    for style in ("payload=Invoice", '@kinds.kind("text.shout"', "async def shout", "def register(registry"):
        assert style in package, f"the example package declares a kind with {style}"


def test_the_example_package_passes_its_documented_tests(tmp_path: Path) -> None:
    write_doc_examples(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_my_jobs.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
