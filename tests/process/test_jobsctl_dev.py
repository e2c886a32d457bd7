"""`jobsctl dev` for real: it becomes the `make run` stack (over the test's database), which serves jobs
with the token it prints, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.process_fixtures import REPO_ROOT, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# Beyond the stack's own bound for its services to start (120 s).
READY_TIMEOUT_SECONDS = 150
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


def _dev_env(database_url: str, dev_dir: Path) -> dict[str, str]:
    """Free ports rather than the fixed ones, and a directory of its own, so that a `make run` on this
    machine and the checkout's .dev/ stay out of it. The services' default shutdown grace, as shown."""
    inherited = {k: v for k, v in os.environ.items() if k != "JOBS_SHUTDOWN_GRACE_SECONDS"}
    return {
        **inherited,
        "DATABASE_URL": database_url,
        "PYTHONUNBUFFERED": "1",
        "JOBS_DEV_DIR": str(dev_dir),
        "JOBS_DEV_API_LISTEN": f"127.0.0.1:{free_port()}",
        "JOBS_DEV_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
        "JOBS_DEV_WORKER_METRICS_LISTEN": f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}",
        "JOBS_DEV_CONSOLE_LISTEN": f"127.0.0.1:{free_port()}",
    }


class _DevRun:
    """One `jobsctl dev` process, read until it prints the token."""

    def __init__(self, env: dict[str, str]) -> None:
        self.target = env["JOBS_DEV_API_LISTEN"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobsctl", "dev"],
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.output: list[str] = []
        self._lines = _lines(self.process.stdout)
        self.token = ""
        while not self.token:
            line = self._lines.get(timeout=READY_TIMEOUT_SECONDS)
            assert line is not None, "jobsctl dev ended before it was ready:\n" + self.text
            self.output.append(line)
            if line.strip().startswith(TOKEN_PREFIX):
                self.token = line.strip().removeprefix(TOKEN_PREFIX)

    @property
    def text(self) -> str:
        return "".join(self.output)

    def interrupt(self) -> int:
        """Ctrl-C, then the rest of the output once it has ended."""
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=60)
        while (line := self._lines.get(timeout=10)) is not None:
            self.output.append(line)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_jobsctl_dev_runs_the_local_stack_until_ctrl_c(database_url: str, tmp_path: Path) -> None:
    dev = _DevRun(_dev_env(database_url, tmp_path))
    try:
        assert "using DATABASE_URL from the environment" in dev.text
        assert "Operator console: http://127.0.0.1:" in dev.text
        submitted = _cli(dev.target, dev.token, "submit", "echo", "--payload", "from jobsctl dev")
        assert submitted.returncode == 0, submitted.stderr
        result = _cli(dev.target, dev.token, "result", "--wait", submitted.stdout.decode().strip())
        assert (result.returncode, result.stdout) == (0, b"from jobsctl dev"), result.stderr
        assert dev.interrupt() == 0, dev.text
    finally:
        dev.kill()
    assert "stopping: the workers, then the API" in dev.text


def test_the_dev_tokens_survive_a_restart_and_stay_private(database_url: str, tmp_path: Path) -> None:
    env = _dev_env(database_url, tmp_path)
    first = _DevRun(env)
    try:
        job_id = _cli(first.target, first.token, "submit", "echo", "--payload", "kept").stdout.decode().strip()
        assert first.interrupt() == 0, first.text
    finally:
        first.kill()
    kept = tmp_path / "dev-tokens.toml"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tokens.toml").stat().st_mode) == 0o600
    assert first.token in kept.read_text()
    assert first.token not in (tmp_path / "tokens.toml").read_text(), "the API's file holds hashes only"

    kept.chmod(0o644)  # as a careless copy would leave it
    second = _DevRun(env)
    try:
        assert second.token == first.token, "an exported JOBS_TOKEN keeps working"
        assert "dev tokens reused" in second.text and "now owner-only" in second.text
        result = _cli(second.target, first.token, "result", "--wait", job_id)
        assert (result.returncode, result.stdout) == (0, b"kept"), result.stderr
        assert second.interrupt() == 0, second.text
    finally:
        second.kill()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_the_shutdown_drain_is_shown_on_the_console_and_in_each_log(database_url: str, tmp_path: Path) -> None:
    dev = _DevRun(_dev_env(database_url, tmp_path))
    try:
        assert dev.interrupt() == 0, dev.text
    finally:
        dev.kill()
    after_stop = dev.text.split("stopping: the workers, then the API", 1)[1].splitlines()
    shown = [re.sub(r"after [0-9.]+s", "after Ns", line) for line in after_stop if line.strip()]
    assert shown == [
        "draining the workers: running jobs get up to 20s to finish, the rest are handed back",
        "worker-1 drained and stopped after Ns",
        "worker-2 drained and stopped after Ns",
        "draining the API: calls in flight get up to 10s",
        "api drained and stopped after Ns",
    ]
    for name in ("worker-1", "worker-2"):
        messages = _log_messages(tmp_path / "logs" / f"{name}.log")
        assert any(m.startswith("draining: no new claims; 0 running jobs") for m in messages), messages
        assert any(re.fullmatch(r"drained in [0-9.]+s: 0 jobs finished, 0 handed back", m) for m in messages)
    api_messages = _log_messages(tmp_path / "logs" / "api.log")
    assert any(m.startswith("shutting down: draining calls in flight") for m in api_messages), api_messages
    assert any(re.fullmatch(r"API stopped: drained in [0-9.]+s", m) for m in api_messages), api_messages


def _log_messages(path: Path) -> list[str]:
    messages = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            messages.append(json.loads(line)["message"])
    return messages


def _dev_stack_module(monkeypatch: pytest.MonkeyPatch):
    """scripts/ is no package: the script loaded from its path (dataclasses need it in sys.modules)."""
    spec = importlib.util.spec_from_file_location("dev_stack", REPO_ROOT / "scripts" / "dev_stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "dev_stack", module)
    spec.loader.exec_module(module)
    return module


class _SignalAfterTheWait(threading.Event):
    """The first wait times out, and the Ctrl-C lands just after it, before the caller's next step."""

    def wait(self, timeout: float | None = None) -> bool:
        if self.is_set():
            return True
        self.set()
        return False


class _RunningChild:
    def poll(self) -> None:
        return None


def test_ctrl_c_between_two_polls_of_a_running_stack_is_a_clean_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev_stack = _dev_stack_module(monkeypatch)
    stack = dev_stack.Stack(dev_stack.Addresses(), dev_stack.DevPaths(tmp_path), stop_requested=_SignalAfterTheWait())
    stack.children.append(dev_stack.Child("worker-1", _RunningChild(), tmp_path / "worker-1.log"))
    assert dev_stack._supervise(stack) == 0
