"""`jobsctl dev` for real: it becomes the `make run` stack (over the test's database), which serves jobs
with the token it prints, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

from tests.process_fixtures import REPO_ROOT, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

READY_TIMEOUT_SECONDS = 90
TOKEN_PREFIX = "export JOBS_TOKEN="


def _lines(stream) -> queue.Queue:
    """The process's output, line by line, readable with a timeout."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for raw in iter(stream.readline, b""):
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _cli(target: str, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JOBS_TOKEN": token, "JOBS_API_TARGET": target}
    return subprocess.run(
        [sys.executable, "-m", "jobsctl", *args], env=env, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False
    )


def test_jobsctl_dev_runs_the_local_stack_until_ctrl_c(database_url: str) -> None:
    # Free ports rather than the fixed ones, so a `make run` on this machine cannot get in the way.
    target = f"127.0.0.1:{free_port()}"
    addresses = {
        "JOBS_DEV_API_LISTEN": target,
        "JOBS_DEV_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
        "JOBS_DEV_WORKER_METRICS_LISTEN": f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}",
    }
    dev = subprocess.Popen(
        [sys.executable, "-m", "jobsctl", "dev"],
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1", **addresses},
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output: list[str] = []
    try:
        lines = _lines(dev.stdout)
        token = None
        while token is None:
            line = lines.get(timeout=READY_TIMEOUT_SECONDS)
            assert line is not None, "jobsctl dev ended before it was ready:\n" + "".join(output)
            output.append(line)
            if line.strip().startswith(TOKEN_PREFIX):
                token = line.strip().removeprefix(TOKEN_PREFIX)
        assert "using DATABASE_URL from the environment" in "".join(output)

        submitted = _cli(target, token, "submit", "echo", "--payload", "from jobsctl dev")
        assert submitted.returncode == 0, submitted.stderr
        result = _cli(target, token, "result", "--wait", submitted.stdout.decode().strip())
        assert (result.returncode, result.stdout) == (0, b"from jobsctl dev"), result.stderr

        dev.send_signal(signal.SIGINT)
        assert dev.wait(timeout=60) == 0
        while (line := lines.get(timeout=10)) is not None:
            output.append(line)
        assert "stopping: the workers, then the API" in "".join(output)
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
