"""The service processes pace the garbage collector's young generation, keeping the older ones' ratios."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.garbage_collection import YOUNG_GENERATION_THRESHOLD, pace_garbage_collector

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def restored_thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_only_the_young_generation_is_paced(restored_thresholds):
    gc.set_threshold(700, 11, 12)
    pace_garbage_collector()
    assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, 11, 12)


@pytest.mark.parametrize("module", ["api_service", "worker_service"])
def test_each_service_process_paces_it_before_it_serves(module, tmp_path):
    # The entry point's main() with settings that fail only after they are read: it has paced the
    # collector by then or never will, since serving is the next step.
    probe = (
        "import gc, sys\n"
        "from shared import event_loop\n"
        f"import {module}.__main__ as entry\n"
        "event_loop.run = lambda coroutine, env: (coroutine.close(), print(gc.get_threshold()[0]))[1]\n"
        "sys.exit(entry.main())\n"
    )
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\ntoken_sha256 = "' + "0" * 64 + '"\ntenant = "t"\n')
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "JOBS_TOKENS_FILE": str(tokens),
        "JOBS_WORKER_TOKEN": "t",
    }
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split()[-1:] == [str(YOUNG_GENERATION_THRESHOLD)], done.stderr
