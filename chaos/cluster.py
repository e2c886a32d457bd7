"""The processes of a chaos run: a private PostgreSQL (never the machine's shared server), the fault
proxy in front of it, the API replicas and the workers, each from its entry point on loopback."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chaos.config import REPO_ROOT, ChaosConfig
from chaos.fault_proxy import FaultProxy
from chaos.history import HISTORY_FILE_ENV
from shared.storage.sql_loader import load_sql_blocks
from tests.private_postgres import PrivatePostgres

_SQL = load_sql_blocks("chaos.sql", package="chaos")
WORKER_TOKEN = "chaos-worker-token"
ADMIN_TOKEN = "chaos-admin-token"
STARTUP_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 15.0
DATABASE = "jobs"


def tenant_token(tenant: str) -> str:
    return f"chaos-token-{tenant}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(eq=False)
class ServiceProcess:
    """One replica; started again under the same name (and port) after it was killed. Its log keeps
    every incarnation's lines, appended."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.paused = False
        self.starts += 1

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> bool:
        """Sends `sig` to this incarnation if it still runs; Popen never signals a process it has reaped,
        so a pid reused by someone else is never hit."""
        if not self.running():
            return False
        assert self.popen is not None
        self.popen.send_signal(sig)
        return True

    def kill(self) -> bool:
        killed = self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait()
        self.paused = False
        return killed

    def pause(self) -> bool:
        self.paused = self.signal(signal.SIGSTOP)
        return self.paused

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> int | None:
        """SIGTERM (after SIGCONT, should it be paused), then SIGKILL if it does not exit in time."""
        if self.popen is None:
            return None
        if self.running():
            self.resume()
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Cluster:
    config: ChaosConfig
    history_path: Path
    postgres: PrivatePostgres = field(init=False)
    proxy: FaultProxy = field(init=False)
    apis: list[ServiceProcess] = field(default_factory=list)
    workers: list[ServiceProcess] = field(default_factory=list)
    api_ports: list[int] = field(default_factory=list)
    postgres_up: bool = False
    stopped: bool = False

    @property
    def owner_url(self) -> str:
        """Straight to the server, as its owner: for setup and for reading the final state."""
        return self.postgres.admin_url(DATABASE)

    def _service_url(self, login: str) -> str:
        # The proxy reads nothing of the protocol, but TLS would be pointless on loopback through it.
        return (
            f"postgresql://{login}@127.0.0.1:{self.proxy.port}/{DATABASE}"
            "?connect_timeout=2&sslmode=disable&gssencmode=disable"
        )

    @property
    def api_target(self) -> str:
        """Every API replica, for a gRPC channel that moves to the next when one stops answering."""
        return "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in self.api_ports)

    def start(self) -> None:
        logs = self.config.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.postgres = PrivatePostgres(free_port())
        self.postgres.start()
        self.postgres_up = True
        with psycopg.connect(self.postgres.admin_url(), autocommit=True) as admin:
            admin.execute(_SQL["database_create"])
        self._migrate(logs / "migrate.log")
        with psycopg.connect(self.owner_url, autocommit=True) as owner:
            owner.execute(_SQL["service_logins_create"])
        self.proxy = FaultProxy("127.0.0.1", self.postgres.port)
        tokens_file = self._write_tokens()
        self.api_ports = [free_port() for _ in range(self.config.api_replicas)]
        for number, port in enumerate(self.api_ports, start=1):
            self.apis.append(self._api(f"api{number}", port, tokens_file, logs))
        for api in self.apis:
            api.start()
        for port in self.api_ports:
            self._wait_serving(port)
        for number in range(1, self.config.workers + 1):
            self.workers.append(self._worker(f"w{number}", logs))
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            self._wait_announced(worker)

    def _migrate(self, log_path: Path) -> None:
        """By the entry point a Kubernetes Job runs."""
        env = {**os.environ, "DATABASE_URL": self.owner_url, "PYTHONUNBUFFERED": "1"}
        with log_path.open("wb") as log:
            subprocess.run(
                [self.config.python, "-m", "api_service", "migrate"],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=STARTUP_TIMEOUT_SECONDS,
            )

    def _write_tokens(self) -> Path:
        path = self.config.workdir / "tokens.toml"
        entries = [
            f'[[principal]]\ntoken_sha256 = "{_sha256(tenant_token(t))}"\ntenant = "{t}"\n' for t in self.config.tenants
        ]
        entries.append(f'[[principal]]\ntoken_sha256 = "{_sha256(WORKER_TOKEN)}"\nrole = "worker"\n')
        entries.append(f'[[principal]]\ntoken_sha256 = "{_sha256(ADMIN_TOKEN)}"\nrole = "admin"\nname = "chaos"\n')
        path.write_text("\n".join(entries))
        return path

    def _common_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "JOBS_FAULT_INJECTION": str(self.config.statement_faults),
            "JOBS_SHUTDOWN_GRACE_SECONDS": "2",
        }

    def _api(self, name: str, port: int, tokens_file: Path, logs: Path) -> ServiceProcess:
        env = {
            **self._common_env(),
            "DATABASE_URL": self._service_url("api_login"),
            "JOBS_API_LISTEN": f"127.0.0.1:{port}",
            "JOBS_TOKENS_FILE": str(tokens_file),
            "JOBS_HEALTH_INTERVAL_SECONDS": "0.2",
            "JOBS_DB_ACQUIRE_TIMEOUT_SECONDS": "1",
            "JOBS_SCHEDULER_ENABLED": "false",
        }
        return ServiceProcess(name, [self.config.python, *self.config.api_argv], env, logs / f"{name}.log")

    def _worker(self, name: str, logs: Path) -> ServiceProcess:
        env = {
            **self._common_env(),
            "DATABASE_URL": self._service_url("worker_login"),
            "JOBS_API_TARGET": self.api_target,
            "JOBS_WORKER_TOKEN": WORKER_TOKEN,
            "JOBS_WORKER_ID": name,
            "JOBS_HANDLER_MODULES": "chaos.handlers",
            HISTORY_FILE_ENV: str(self.history_path),
            "JOBS_LEASE_SECONDS": str(self.config.lease_seconds),
            "JOBS_WORKER_CONCURRENCY": str(self.config.worker_concurrency),
            "JOBS_POLL_INTERVAL_SECONDS": "0.2",
            "JOBS_RESCUE_INTERVAL_SECONDS": str(min(0.5, self.config.lease_seconds / 4)),
        }
        return ServiceProcess(name, [self.config.python, *self.config.worker_argv], env, logs / f"{name}.log")

    def _wait_serving(self, port: int) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                self._fail_if_exited()
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"the API on port {port} did not serve within {STARTUP_TIMEOUT_SECONDS:.0f}s")

    def _wait_announced(self, worker: ServiceProcess) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while f"worker {worker.name}:" not in worker.log_text():
            self._fail_if_exited()
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {worker.name} did not start within {STARTUP_TIMEOUT_SECONDS:.0f}s")
            time.sleep(0.1)

    def _fail_if_exited(self) -> None:
        for process in [*self.apis, *self.workers]:
            if process.popen is not None and process.popen.poll() is not None:
                raise RuntimeError(
                    f"{process.name} exited with {process.popen.returncode}:\n{process.log_text()[-3000:]}"
                )

    def crash_postgres(self) -> None:
        """`immediate`: no checkpoint, crash recovery at the next start."""
        self.postgres_up = False
        self.postgres.stop("immediate")

    def start_postgres(self) -> None:
        self.postgres.start()
        self.postgres_up = True

    def heal(self) -> None:
        """Every fault undone: the server up, nothing paused, every replica running, the relay clear."""
        if not self.postgres_up:
            self.start_postgres()
        self.proxy.heal()
        for process in [*self.apis, *self.workers]:
            if process.paused:
                process.resume()
            if not process.running():
                process.start()

    def stop(self) -> None:
        """Stops every process and removes the private server's data; again, it does nothing."""
        for process in [*self.workers, *self.apis]:
            process.stop()
        if hasattr(self, "proxy"):
            self.proxy.close()
        if hasattr(self, "postgres") and not self.stopped:
            self.postgres.destroy()
        self.stopped = True


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
