"""End-to-end fixtures: the real `python -m api_service` and `python -m worker_service` processes on
loopback ports, over the test's fresh database."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobs.v1 import admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc, worker_pb2_grpc

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_TOKEN = "test-worker-token"
# Operators: ADMIN_TOKEN is role "admin" named "ops", READONLY_TOKEN role "admin-readonly" named "console".
ADMIN_TOKEN = "test-admin-token"
READONLY_TOKEN = "test-readonly-token"
# A bound on a start, not an expectation of it: on two busy cores an API whose pool's first connection
# failed was seen still starting after 20 s, which failed the test rather than its service.
STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0
# Short leases and quick sweeps keep fault tests to seconds.
FAST_WORKER_ENV = {
    "JOBS_LEASE_SECONDS": "2",
    "JOBS_POLL_INTERVAL_SECONDS": "0.2",
    "JOBS_RESCUE_INTERVAL_SECONDS": "0.3",
    "JOBS_SHUTDOWN_GRACE_SECONDS": "5",
}


def wait_until(condition: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: str = "") -> T:
    """Polls `condition` until it returns something truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tenant_token(tenant: str) -> str:
    return f"test-token-{tenant}"


@dataclass
class ServiceProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path
    metrics_port: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def metric_value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics_text().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            if (sample == name or sample.startswith(name + "{")) and all(
                f'{k}="{v}"' in sample for k, v in (labels or {}).items()
            ):
                total += float(value)
        return total

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """SIGTERM (after SIGCONT, in case it is paused), then SIGKILL if it does not exit in time."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


@dataclass
class TenantClient:
    """A tenant caller: JobService stub plus its credential."""

    stub: jobs_pb2_grpc.JobServiceStub
    metadata: tuple[tuple[str, str], ...]

    def submit(self, kind: str, payload: bytes = b"", **fields) -> jobs_pb2.SubmitJobResponse:
        return self.stub.SubmitJob(
            jobs_pb2.SubmitJobRequest(kind=kind, payload=payload, **fields), metadata=self.metadata, timeout=10
        )

    def submit_many(self, requests: list[jobs_pb2.SubmitJobRequest]) -> jobs_pb2.SubmitJobsResponse:
        return self.stub.SubmitJobs(jobs_pb2.SubmitJobsRequest(jobs=requests), metadata=self.metadata, timeout=30)

    def get(self, job_id: str) -> jobs_pb2.Job:
        return self.stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), metadata=self.metadata, timeout=10)

    def wait_state(self, job_id: str, state: int, *, timeout: float = 30) -> jobs_pb2.Job:
        """The job once it is in `state` (a jobs_pb2.JobState), polled."""
        return wait_until(
            lambda: job if (job := self.get(job_id)).state == state else None,
            timeout=timeout,
            what=f"job {job_id} to be {jobs_pb2.JobState.Name(state)}",
        )

    def result(self, job_id: str) -> jobs_pb2.JobResult:
        return self.stub.GetJobResult(jobs_pb2.GetJobResultRequest(job_id=job_id), metadata=self.metadata, timeout=10)


@dataclass
class AdminClient:
    """An operator: AdminService stub plus its credential."""

    stub: admin_pb2_grpc.AdminServiceStub
    metadata: tuple[tuple[str, str], ...]


@dataclass
class ServiceStack:
    database_url: str
    workdir: Path
    tenants: tuple[str, ...] = ("acme", "globex")
    api_port: int = field(default_factory=free_port)
    processes: list[ServiceProcess] = field(default_factory=list)
    # With TLS on the API's port: how the test's channels connect, and the plaintext health-only port
    # (JOBS_HEALTH_LISTEN) that `health` then reads.
    channel_credentials: grpc.ChannelCredentials | None = None
    health_port: int | None = None
    _channels: list[grpc.Channel] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tokens_file = self.workdir / "tokens.toml"
        entries = [
            f'[[principal]]\ntoken_sha256 = "{_sha256(tenant_token(t))}"\ntenant = "{t}"\n' for t in self.tenants
        ]
        entries.append(f'[[principal]]\ntoken_sha256 = "{_sha256(WORKER_TOKEN)}"\nrole = "worker"\n')
        entries.append(f'[[principal]]\ntoken_sha256 = "{_sha256(ADMIN_TOKEN)}"\nrole = "admin"\nname = "ops"\n')
        entries.append(
            f'[[principal]]\ntoken_sha256 = "{_sha256(READONLY_TOKEN)}"\nrole = "admin-readonly"\nname = "console"\n'
        )
        self.tokens_file.write_text("\n".join(entries))

    @property
    def api_target(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    def _spawn(self, name: str, module: str, env: dict[str, str], launcher: Sequence[str] = ()) -> ServiceProcess:
        metrics_port = free_port()
        full_env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "JOBS_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as log_file:
            popen = subprocess.Popen(
                [*launcher, sys.executable, "-m", module],
                cwd=REPO_ROOT,
                env=full_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        process = ServiceProcess(name, popen, log_path, metrics_port)
        self.processes.append(process)
        return process

    def start_api(self, name: str = "api", **env: str) -> ServiceProcess:
        """Starts an API replica and waits until the stack's API address answers SERVING (a second
        replica given its own JOBS_API_LISTEN is then only known to have started)."""
        process = self._spawn(
            name,
            "api_service",
            {
                "JOBS_API_LISTEN": self.api_target,
                "JOBS_TOKENS_FILE": str(self.tokens_file),
                "JOBS_HEALTH_INTERVAL_SECONDS": "0.2",
                **env,
            },
        )
        wait_until(
            lambda: self._exited_early(process) or self.health() == "SERVING",
            timeout=STARTUP_TIMEOUT_SECONDS,
            what="the API to serve",
        )
        return process

    def spawn_worker(
        self, name: str, module: str = "worker_service", launcher: Sequence[str] = (), **env: str
    ) -> ServiceProcess:
        """Starts a worker replica (`python -m module`, after `launcher` such as opentelemetry-instrument)
        without waiting for it to announce itself."""
        return self._spawn(
            name,
            module,
            {
                "JOBS_API_TARGET": self.api_target,
                "JOBS_WORKER_TOKEN": WORKER_TOKEN,
                "JOBS_WORKER_ID": name,
                **FAST_WORKER_ENV,
                **env,
            },
            launcher,
        )

    def start_worker(
        self, name: str, module: str = "worker_service", launcher: Sequence[str] = (), **env: str
    ) -> ServiceProcess:
        """`spawn_worker`, then waits until the replica has announced itself."""
        process = self.spawn_worker(name, module, launcher, **env)
        wait_until(
            lambda: self._exited_early(process) or f"worker {name}:" in process.log_text(),
            timeout=STARTUP_TIMEOUT_SECONDS,
            what=f"worker {name} to start",
        )
        return process

    def _exited_early(self, process: ServiceProcess) -> bool:
        if process.popen.poll() is not None:
            pytest.fail(f"{process.name} exited with {process.popen.returncode}:\n{process.log_text()[-3000:]}")
        return False

    def channel(self) -> grpc.Channel:
        options = [("grpc.max_send_message_length", 64 << 20)]
        if self.channel_credentials is None:
            channel = grpc.insecure_channel(self.api_target, options=options)
        else:
            channel = grpc.secure_channel(self.api_target, self.channel_credentials, options=options)
        self._channels.append(channel)
        return channel

    def health(self, service: str = "") -> str:
        if self.health_port is None:
            channel = self.channel()
        else:
            channel = grpc.insecure_channel(f"127.0.0.1:{self.health_port}")
            self._channels.append(channel)
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
        except grpc.RpcError:
            return "UNREACHABLE"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def tenant(self, tenant: str) -> TenantClient:
        return TenantClient(
            jobs_pb2_grpc.JobServiceStub(self.channel()), (("authorization", f"Bearer {tenant_token(tenant)}"),)
        )

    def admin(self, token: str = ADMIN_TOKEN) -> AdminClient:
        return AdminClient(admin_pb2_grpc.AdminServiceStub(self.channel()), (("authorization", f"Bearer {token}"),))

    def worker_stub(self) -> tuple[worker_pb2_grpc.WorkerServiceStub, tuple[tuple[str, str], ...]]:
        return worker_pb2_grpc.WorkerServiceStub(self.channel()), (("authorization", f"Bearer {WORKER_TOKEN}"),)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        for process in reversed(self.processes):
            process.stop()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def service_stack(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServiceStack]:
    """Nothing started yet: a test starts the API and the workers it needs. Logs are printed on failure."""
    stack = ServiceStack(database_url, tmp_path)
    try:
        yield stack
    finally:
        stack.close()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for process in stack.processes:
                print(f"\n----- {process.name} log (tail) -----\n{process.log_text()[-4000:]}")


@pytest.fixture(scope="module")
def module_service_stack(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceStack]:
    """One process stack for every test of a module, over one database, stopped after the module's last
    test: for tests that each submit and read their own jobs, keys and rows, so that none sees what
    another did, and that leave the processes as they found them (no signal, kill, pause or restart).
    A module's fixture starts the API and the workers once. A failed test's report carries the logs."""
    stack = ServiceStack(module_database_url, tmp_path_factory.mktemp("module-stack"))
    try:
        yield stack
    finally:
        stack.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    shared = getattr(item, "funcargs", {}).get("module_service_stack")
    if report.failed and shared is not None:
        for process in shared.processes:
            report.sections.append((f"{process.name} log (tail)", process.log_text()[-4000:]))
    return report
