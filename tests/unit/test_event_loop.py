"""The services' event loop: uvloop's by default, the standard library's on request, a clear error else."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from shared import event_loop
from shared.env_settings import SettingsError
from tests.process_fixtures import REPO_ROOT


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_the_services_run_on_uvloop_unless_told_otherwise() -> None:
    assert isinstance(event_loop.run(_running_loop(), {}), uvloop.Loop)
    assert isinstance(event_loop.run(_running_loop(), {"JOBS_EVENT_LOOP": " uvloop "}), uvloop.Loop)


def test_asyncio_names_the_standard_librarys_loop() -> None:
    loop = event_loop.run(_running_loop(), {"JOBS_EVENT_LOOP": "asyncio"})
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop)


def test_another_name_is_a_configuration_error_before_anything_runs() -> None:
    main = _running_loop()
    with pytest.raises(SettingsError, match="JOBS_EVENT_LOOP must be one of uvloop, asyncio, not 'trio'"):
        event_loop.run(main, {"JOBS_EVENT_LOOP": "trio"})
    main.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("service", ["worker_service", "api_service"])
def test_a_service_given_an_unknown_loop_exits_with_a_configuration_error(service: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\ntoken_sha256 = "' + "0" * 64 + '"\ntenant = "t"\n')
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "JOBS_WORKER_TOKEN": "t",
        "JOBS_TOKENS_FILE": str(tokens),
        "JOBS_EVENT_LOOP": "trio",
    }
    run = subprocess.run(
        [sys.executable, "-m", service], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 2, run.stderr
    assert "configuration error: JOBS_EVENT_LOOP must be one of" in run.stderr
    assert "Traceback" not in run.stderr
