"""Fresh databases and the real service processes for the benchmarks (loopback only)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg import sql
from psycopg.types.json import Jsonb

from shared.storage.migrator import migrate
from shared.storage.sql_loader import load_sql_blocks

REPO = Path(__file__).resolve().parent.parent
ADMIN_URL = os.environ.get("BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TENANTS = ("bench-a", "bench-b")
START_TIMEOUT_SECONDS = 30.0
# The benchmark venv of the peer's own (the Makefile's bench target makes it).
PEER_PYTHON = os.environ.get("BENCH_PEER_PYTHON", str(REPO / ".bench-venv" / "bin" / "python"))
PEER_SCRIPT = REPO / "benchmarks" / "pgqueuer_peer.py"
PEER_TIMEOUT_SECONDS = 600.0
_WORKDOWN_SQL = load_sql_blocks("workdown.sql", package="benchmarks")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def median(values: list[float]) -> float:
    return statistics.median(values)


@contextlib.contextmanager
def fresh_database(label: str, *, migrated: bool = True) -> Iterator[str]:
    """A new database with every migration applied (or empty, for a peer), dropped afterwards."""
    name = f"jobs_bench_{label}_{os.getpid()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = urlsplit(ADMIN_URL)._replace(path=f"/{name}").geturl()
    try:
        if migrated:
            migrate(url)
        yield url
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def plain_insert_params(
    tenant: str, n: int, *, kind: str = "echo", labels: dict[str, str] | None = None
) -> dict[str, object]:
    """The parameters of queries.JOB_INSERT_MANY for `n` no-op jobs of one tenant, as the benchmarks
    load them: the service's own insert, with no idempotency key, dependency or resource."""
    return {
        "tenant": tenant,
        "actor": "bench",
        "parent_job_id": None,
        "job_ids": [str(uuid.uuid4()) for _ in range(n)],
        "kinds": [kind] * n,
        "payloads": [b"x"] * n,
        "priorities": [0] * n,
        "run_afters": [None] * n,
        "deadlines": [None] * n,
        "max_attempts": [3] * n,
        "backoff_bases": [1.0] * n,
        "backoff_caps": [300.0] * n,
        "labels": [Jsonb(labels or {})] * n,
        "traceparents": [None] * n,
        "tracestates": [None] * n,
    }


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU a live process has used (0 for one that is gone), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # utime and stime are the 14th and 15th fields; the command before them, in parentheses, may hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def backend_cpu(conn: psycopg.Connection) -> dict[int, float]:
    """The CPU seconds of each server process serving the connection's database, but its own: the
    server's shared processes and other databases' sessions are left out."""
    pids = [row[0] for row in conn.execute(_WORKDOWN_SQL["database_backends"]).fetchall()]
    return {pid: cpu_seconds(pid) for pid in pids}


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two readings of the same processes; one that started between them
    counts whole, one that ended between them is lost (the benchmarks' sessions outlive their runs)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def durability_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in ("fsync", "synchronous_commit", "server_version")}


@dataclass
class ServicePair:
    """The API and N worker replicas as separate processes over one database."""

    database_url: str
    workers: int = 2
    worker_env: dict[str, str] = field(default_factory=dict)
    api_env: dict[str, str] = field(default_factory=dict)
    api_port: int = field(default_factory=free_port)
    tokens: dict[str, str] = field(default_factory=lambda: {t: secrets.token_urlsafe(16) for t in TENANTS})
    worker_token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    def metadata(self, tenant: str = TENANTS[0]) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.tokens[tenant]}"),)

    def __enter__(self) -> ServicePair:
        self._workdir = tempfile.TemporaryDirectory(prefix="jobs-bench-")
        tokens_file = Path(self._workdir.name) / "tokens.toml"
        lines = [f'[[principal]]\ntoken_sha256 = "{_sha(tok)}"\ntenant = "{t}"\n' for t, tok in self.tokens.items()]
        lines.append(f'[[principal]]\ntoken_sha256 = "{_sha(self.worker_token)}"\nrole = "worker"\n')
        tokens_file.write_text("\n".join(lines))
        common = {"DATABASE_URL": self.database_url, "JOBS_LOG_LEVEL": "WARNING"}
        # The per-tenant quotas would measure themselves, not the service: off for the benchmarks.
        unlimited = {"JOBS_TENANT_SUBMIT_RATE": "0", "JOBS_TENANT_MAX_QUEUED_JOBS": "0"}
        self._spawn(
            "api",
            "api_service",
            {
                **common,
                **unlimited,
                "JOBS_API_LISTEN": self.target,
                "JOBS_TOKENS_FILE": str(tokens_file),
                **self.api_env,
            },
        )
        self._wait_serving()
        for number in range(self.workers):
            self._spawn(
                f"worker-{number}",
                "worker_service",
                {
                    **common,
                    "JOBS_API_TARGET": self.target,
                    "JOBS_WORKER_TOKEN": self.worker_token,
                    "JOBS_WORKER_ID": f"bench-{number}",
                    **self.worker_env,
                },
            )
        time.sleep(1.0)  # let the workers open their pools and LISTEN connections
        return self

    def api_pid(self) -> int:
        return self.processes[0].pid

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes[1:]]

    def _spawn(self, name: str, module: str, env: dict[str, str]) -> None:
        log = open(Path(self._workdir.name) / f"{name}.log", "wb")  # noqa: SIM115 - closed with the workdir
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", module],
                cwd=REPO,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                with contextlib.suppress(grpc.RpcError):
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                        return
                time.sleep(0.1)
        raise RuntimeError("the API did not start; see its log in " + self._workdir.name)

    def __exit__(self, *exc) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        if not exc or exc[0] is None:
            self._workdir.cleanup()


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no RSS for {pid}")


def pgqueuer_peer(url: str, jobs: int, batch: int = 100, dequeuers: int = 5, producers: int = 1) -> dict[str, float]:
    """PgQueuer's enqueue (from `producers` at once) and drain of `jobs` jobs into the empty database
    at `url`, run by the peer's own venv (its figures: enqueue_per_s, drain_per_s, combined_per_s)."""
    if not Path(PEER_PYTHON).exists():
        raise RuntimeError(f"no PgQueuer venv at {PEER_PYTHON}: run `make bench`, which creates it")
    done = subprocess.run(
        [PEER_PYTHON, str(PEER_SCRIPT), url, str(jobs), str(batch), str(dequeuers), str(producers)],
        capture_output=True,
        text=True,
        timeout=PEER_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the PgQueuer run failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures
