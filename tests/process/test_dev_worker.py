"""The edit loop: `make dev-worker` runs one worker with the user's modules beside a running stack and
starts it again when one of their files changes; the stack's "port in use" message names the variable
that moves the port."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_jobs import Client
from durable_jobs.errors import InvalidArgument, JobNotSucceeded
from tests.process_fixtures import REPO_ROOT, WORKER_TOKEN, ServiceStack, free_port, tenant_token, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MODULE_TEXT = """
from durable_jobs import JobContext, JobKinds

kinds = JobKinds()


@kinds.kind("dev.greet")
def greet(ctx: JobContext) -> bytes:
    return b"{greeting}, " + ctx.payload
"""


def _dev_stack_module(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("dev_stack", REPO_ROOT / "scripts" / "dev_stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "dev_stack", module)
    spec.loader.exec_module(module)
    return module


def test_a_port_in_use_is_named_with_the_variable_that_moves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    dev_stack = _dev_stack_module(monkeypatch)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        free = [f"127.0.0.1:{free_port()}" for _ in range(4)]
        for field, variable in (("api", "JOBS_DEV_API_LISTEN"), ("console", "JOBS_DEV_CONSOLE_LISTEN")):
            addresses = dev_stack.Addresses(
                api=free[0], api_metrics=free[1], worker_metrics=(free[2], free[3]), console=free[0]
            )
            addresses = dev_stack.Addresses(**{**addresses.__dict__, field: busy})
            with pytest.raises(dev_stack.StackError) as refused:
                dev_stack._check_ports_free(addresses)
            assert f"{busy} is already in use" in str(refused.value) and f"{variable}=" in str(refused.value)


def _result(client: Client, payload: str) -> bytes | None:
    """The kind's result, or None while no worker has published it yet (the submission is refused)."""
    try:
        return client.result(client.submit("dev.greet", payload).job_id, wait=True, timeout=20)
    except (InvalidArgument, JobNotSucceeded):
        return None


def test_the_dev_worker_runs_the_users_kinds_and_restarts_when_their_file_changes(
    service_stack: ServiceStack, tmp_path: Path
) -> None:
    service_stack.start_api()
    dev_dir, code = tmp_path / "dev", tmp_path / "code"
    dev_dir.mkdir()
    code.mkdir()
    (dev_dir / "stack.toml").write_text(
        f'database_url = "{service_stack.database_url}"\napi_target = "{service_stack.api_target}"\n'
    )
    (dev_dir / "dev-tokens.toml").write_text(f'worker_token = "{WORKER_TOKEN}"\n')
    module = code / "greetings.py"
    module.write_text(MODULE_TEXT.format(greeting="hello"))
    env = {**os.environ, "JOBS_DEV_DIR": str(dev_dir), "PYTHONPATH": os.pathsep.join([str(code), str(REPO_ROOT)])}
    log = (tmp_path / "dev-worker.log").open("wb")
    loop = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "scripts" / "dev_worker.py"), "--modules", "greetings"],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Client(service_stack.api_target, tenant_token("acme"), timeout=20) as client:
            wait_until(lambda: _result(client, "ada") == b"hello, ada", timeout=60, what="the first version")
            time.sleep(0.01)  # a later mtime than the first write, on file systems with coarse clocks
            module.write_text(MODULE_TEXT.format(greeting="welcome back"))
            wait_until(lambda: _result(client, "ada") == b"welcome back, ada", timeout=60, what="the edited version")
        text = (tmp_path / "dev-worker.log").read_text(errors="replace")
        assert "greetings.py changed; restarting the worker" in text
    finally:
        loop.send_signal(signal.SIGINT)
        assert loop.wait(30) == 0
        log.close()
