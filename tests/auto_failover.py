"""A pg_auto_failover formation of the test's own: a monitor, a primary and a synchronous secondary, each
a PostgreSQL of its own on a loopback port under a temporary folder, run as an unprivileged OS user
(pg_autoctl and PostgreSQL refuse root). The machine's shared server is never touched.

The monitor's health checks are tightened so that a lost primary is replaced in seconds rather than
the half minute the defaults take; the node's own partition timeout stays below the monitor's demote
timeout, as pg_auto_failover requires for a safe promotion."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.process_tree import running, signal_every_process

UNPRIVILEGED_USER = "postgres"
HOST = "127.0.0.1"
DATABASE = "jobs"
# Creating a node runs initdb or pg_basebackup and waits for the monitor: slow on a busy machine.
CREATE_TIMEOUT_SECONDS = 180
READY_TIMEOUT_SECONDS = 180
# Monitor settings (milliseconds): a node is unhealthy after its keeper went silent this long and the
# monitor's checks failed; the secondary is promoted once the old primary had this long to demote itself.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 2000,
    "pgautofailover.health_check_max_retries": 2,
    "pgautofailover.health_check_retry_delay": 1000,
    "pgautofailover.node_considered_unhealthy_timeout": 5000,
    "pgautofailover.primary_demote_timeout": 8000,
}
# A primary cut off from the monitor and its standby demotes itself after this long (seconds); it must stay
# below primary_demote_timeout, or a partitioned primary could still accept writes after the promotion.
NETWORK_PARTITION_TIMEOUT_SECONDS = 4


def _bindir() -> Path:
    """The PostgreSQL version pg_auto_failover's extension was built for."""
    controls = glob.glob("/usr/share/postgresql/*/extension/pgautofailover.control")
    if not controls:
        raise RuntimeError("pg_auto_failover is not installed (make system-deps installs it)")
    version = sorted(controls, key=lambda p: int(p.split("/")[4]))[-1].split("/")[4]
    return Path(f"/usr/lib/postgresql/{version}/bin")


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    log: Path
    popen: subprocess.Popen | None = None


class Formation:
    def __init__(self, monitor_port: int, node_ports: tuple[int, int]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="jobs-autofailover-"))
        self._bin = _bindir()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam(UNPRIVILEGED_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", UNPRIVILEGED_USER, "--"]
        # pg_autoctl keeps its configuration and state under the XDG folders: the test's own.
        self._env = {
            "PATH": f"{self._bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
        }
        self.monitor = Node("monitor", monitor_port, self.root / "monitor", self.root / "monitor.log")
        self.nodes = [
            Node(f"node{i}", port, self.root / f"node{i}", self.root / f"node{i}.log")
            for i, port in enumerate(node_ports, start=1)
        ]

    @property
    def monitor_url(self) -> str:
        return f"postgresql://autoctl_node@{HOST}:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def admin_url(self, node: Node, database: str = DATABASE) -> str:
        return f"postgresql://postgres@{HOST}:{node.port}/{database}?sslmode=disable&connect_timeout=2"

    def url(self, user: str) -> str:
        """The multi-host URL the services use: libpq tries each host and keeps the one that takes writes."""
        hosts = ",".join(f"{HOST}:{node.port}" for node in self.nodes)
        return (
            f"postgresql://{user}@{hosts}/{DATABASE}?target_session_attrs=read-write&connect_timeout=2&sslmode=disable"
        )

    def _autoctl(self, *args: str) -> None:
        completed = subprocess.run(
            [*self._as_user, "env", *(f"{k}={v}" for k, v in self._env.items()), "pg_autoctl", *args],
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT_SECONDS,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"pg_autoctl {args[:2]} failed:\n{completed.stdout[-3000:]}{completed.stderr[-3000:]}")

    def _run(self, node: Node) -> None:
        """`pg_autoctl run` in a session of its own: the keeper and its PostgreSQL (whose backends each start
        another session, so `_processes_under` finds them by parentage)."""
        with node.log.open("ab") as log:
            node.popen = subprocess.Popen(
                [*self._as_user, "env", *(f"{k}={v}" for k, v in self._env.items()), "pg_autoctl", "run"]
                + ["--pgdata", str(node.pgdata)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def start(self) -> None:
        """Creates and runs the monitor, then the primary, then the secondary; returns once the primary
        replicates synchronously to the secondary."""
        pg_ctl = str(self._bin / "pg_ctl")
        self._autoctl(
            "create", "monitor", "--pgdata", str(self.monitor.pgdata), "--pgport", str(self.monitor.port),
            "--hostname", HOST, "--auth", "trust", "--no-ssl", "--pgctl", pg_ctl,
        )  # fmt: skip
        self._autoctl("config", "set", "--pgdata", str(self.monitor.pgdata), "postgresql.listen_addresses", HOST)
        self._run(self.monitor)
        self._wait(lambda: self._monitor_query("SELECT 1"), "the monitor to answer")
        with psycopg.connect(self.admin_url(self.monitor, "pg_auto_failover"), autocommit=True) as conn:
            for name, value in MONITOR_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = {int(value)}")
            conn.execute("SELECT pg_reload_conf()")
        for index, node in enumerate(self.nodes):
            self._autoctl(
                "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                "--listen", HOST, "--hostname", HOST, "--name", node.name, "--dbname", DATABASE,
                "--auth", "trust", "--no-ssl", "--pgctl", pg_ctl, "--monitor", self.monitor_url,
            )  # fmt: skip
            self._autoctl(
                "config", "set", "--pgdata", str(node.pgdata),
                "timeout.network_partition_timeout", str(NETWORK_PARTITION_TIMEOUT_SECONDS),
            )  # fmt: skip
            self._run(node)
            wanted = {"node1": "single"} if index == 0 else {"node1": "primary", "node2": "secondary"}
            self._wait(lambda wanted=wanted: self.states() == wanted, f"the formation to reach {wanted}")

    def states(self) -> dict[str, str]:
        """Each node's state where the monitor's goal and the node's report agree; nodes in transition
        are left out."""
        rows = self._monitor_query("SELECT nodename, reportedstate, goalstate FROM pgautofailover.node") or []
        return {name: reported for name, reported, goal in rows if reported == goal}

    def primary(self) -> Node | None:
        """The node that takes writes now, as a client with target_session_attrs=read-write would find it."""
        for node in self.nodes:
            with contextlib.suppress(psycopg.Error), psycopg.connect(self.admin_url(node), autocommit=True) as conn:
                if conn.execute("SHOW transaction_read_only").fetchone()[0] == "off":
                    return node
        return None

    def kill(self, node: Node) -> None:
        """The machine is lost: SIGKILL to every process of the node at once (its keeper, its PostgreSQL and
        every backend), so nothing restarts it and no backend finishes a reply."""
        assert node.popen is not None
        processes = signal_every_process(node.popen.pid, signal.SIGKILL)
        node.popen.wait(30)
        deadline = time.monotonic() + 30
        while alive := [pid for pid in processes if running(pid)]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of {node.name} outlived SIGKILL: {alive}")
            time.sleep(0.05)

    def freeze(self, node: Node) -> None:
        """The machine hangs (a storage stall, a stuck kernel): SIGSTOP to every process of the node. Its
        sockets stay open and the kernel still acknowledges what clients send, but nothing answers."""
        assert node.popen is not None
        signal_every_process(node.popen.pid, signal.SIGSTOP)

    def writable(self, node: Node) -> bool:
        """Whether this node takes writes now (asked of it alone, so a frozen node elsewhere costs nothing)."""
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.admin_url(node), autocommit=True) as conn:
            return bool(conn.execute("SHOW transaction_read_only").fetchone()[0] == "off")
        return False

    def _monitor_query(self, query: str) -> list[tuple] | None:
        try:
            with psycopg.connect(self.admin_url(self.monitor, "pg_auto_failover"), autocommit=True) as conn:
                return conn.execute(query).fetchall()
        except psycopg.Error:
            return None

    def _wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not condition():
            for node in [self.monitor, *self.nodes]:
                if node.popen is not None and node.popen.poll() is not None:
                    raise RuntimeError(f"{node.name} exited while waiting for {what}:\n{self.log_tail(node)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {READY_TIMEOUT_SECONDS}s waiting for {what}")
            time.sleep(0.2)

    def log_tail(self, node: Node, chars: int = 2000) -> str:
        try:
            return node.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def destroy(self) -> None:
        for node in [*self.nodes, self.monitor]:
            if node.popen is not None and node.popen.poll() is None:
                signal_every_process(node.popen.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.popen.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)
