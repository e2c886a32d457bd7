"""`jobsctl dev` for real: it becomes the `make run` stack (over the test's database), which serves jobs
with the token it prints, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.process_fixtures import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# The fixed loopback addresses of scripts/dev_stack.py, the stack `make run` starts.
DEV_ADDRESSES = (("127.0.0.1", 50051), ("127.0.0.1", 9464), ("127.0.0.1", 9465), ("127.0.0.1", 9466))
READY_TIMEOUT_SECONDS = 90
TOKEN_PREFIX = "export JOBS_TOKEN="


def _in_use(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(address) == 0


def _lines(stream) -> queue.Queue:
    """The process's output, line by line, readable with a timeout."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for raw in iter(stream.readline, b""):
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _cli(token: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JOBS_TOKEN": token, "JOBS_API_TARGET": "127.0.0.1:50051"}
    return subprocess.run(
        [sys.executable, "-m", "jobsctl", *args], env=env, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False
    )


def test_jobsctl_dev_runs_the_local_stack_until_ctrl_c(database_url: str) -> None:
    busy = [f"{host}:{port}" for host, port in DEV_ADDRESSES if _in_use((host, port))]
    if busy:
        pytest.skip(f"{', '.join(busy)} in use here (a `make run` of someone else?): the dev stack's ports are fixed")
    dev = subprocess.Popen(
        [sys.executable, "-m", "jobsctl", "dev"],
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"},
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

        submitted = _cli(token, "submit", "echo", "--payload", "from jobsctl dev")
        assert submitted.returncode == 0, submitted.stderr
        result = _cli(token, "result", "--wait", submitted.stdout.decode().strip())
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
