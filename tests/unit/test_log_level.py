"""JOBS_LOG_LEVEL: read once into the typed settings, and a bad value is a configuration error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shared.env_settings import SettingsError, env_log_level
from tests.process_fixtures import REPO_ROOT

pytestmark = pytest.mark.timeout(60)


def test_the_level_is_any_case_and_info_when_unset() -> None:
    assert env_log_level({}) == "INFO"
    assert env_log_level({"JOBS_LOG_LEVEL": " warning "}) == "WARNING"


def test_an_unknown_level_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="JOBS_LOG_LEVEL"):
        env_log_level({"JOBS_LOG_LEVEL": "loud"})


def test_a_worker_given_an_unknown_level_exits_with_a_configuration_error() -> None:
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "JOBS_WORKER_TOKEN": "t",
        "JOBS_LOG_LEVEL": "loud",
    }
    run = subprocess.run(
        [sys.executable, "-m", "worker_service"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 2, run.stderr
    assert "configuration error: JOBS_LOG_LEVEL" in run.stderr
    assert "Traceback" not in run.stderr
