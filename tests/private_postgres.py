"""A PostgreSQL server of the test's own, for tests that stop, crash and restart it: initdb in a
temporary folder, run as an unprivileged OS user (PostgreSQL refuses to run as root; as root, the
`postgres` account runs it through runuser). The machine's shared server is never touched."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

BINDIR_ENV = "JOBS_TEST_PG_BINDIR"
UNPRIVILEGED_USER = "postgres"
START_TIMEOUT_SECONDS = 60


def _bindir() -> Path:
    configured = os.environ.get(BINDIR_ENV)
    if configured:
        return Path(configured)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise RuntimeError(f"no initdb found; set {BINDIR_ENV} to PostgreSQL's bin folder")
    return Path(candidates[-1]).parent


def server_programs_installed() -> bool:
    try:
        return (_bindir() / "initdb").exists()
    except RuntimeError:
        return False


class PrivatePostgres:
    def __init__(
        self,
        port: int,
        *,
        under: str | None = None,
        prefix: str = "jobs-private-pg-",
        settings: dict[str, str] | None = None,
    ) -> None:
        """`under`: the folder the data goes in (a temporary one of the system's by default); `settings`:
        server settings beside the ones every private server has."""
        self.port = port
        self._bin = _bindir()
        self._as_user: list[str] = []
        # Dynamic shared memory in files of the data folder, removed with it: as POSIX segments in
        # /dev/shm, a server stopped `immediate` or killed left a megabyte behind each time.
        self._settings = {
            "max_connections": "200",
            "shared_buffers": "32MB",
            "dynamic_shared_memory_type": "mmap",
            **(settings or {}),
        }
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
        if os.geteuid() == 0:
            account = pwd.getpwnam(UNPRIVILEGED_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", UNPRIVILEGED_USER, "--"]
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._run(
            "initdb",
            "--pgdata",
            str(self.data),
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--no-sync",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
        )

    def program(self, name: str) -> Path:
        """One of the server's programs (`postgres`, `pg_ctl`, ...)."""
        return self._bin / name

    def command(self, *argv: str) -> list[str]:
        """`argv` run as the account that owns the data (the unprivileged user, when running as root)."""
        return [*self._as_user, *argv]

    def copy_data(self, destination: Path) -> None:
        """A copy of the stopped server's data, owned like it, for a backend of its own to run on."""
        self._run_as_owner("cp", "-a", str(self.data), str(destination))

    def admin_url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *args: str) -> None:
        self._run_as_owner(str(self._bin / program), *args)

    def _run_as_owner(self, *argv: str) -> None:
        completed = subprocess.run(
            self.command(*argv),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_SECONDS + 30,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {completed.stdout}{completed.stderr}\n{self.log_tail()}")

    def start(self) -> None:
        """Starts the server and waits until it accepts connections (after crash recovery, if any)."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}" + "".join(
            f" -c {name}={value}" for name, value in self._settings.items()
        )
        self._run(
            "pg_ctl",
            "--pgdata",
            str(self.data),
            "--log",
            str(self.log),
            "--options",
            options,
            "--wait",
            "--timeout",
            str(START_TIMEOUT_SECONDS),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """`immediate` is a crash: no checkpoint, recovery at the next start."""
        self._run("pg_ctl", "--pgdata", str(self.data), "--mode", mode, "--wait", "stop")

    def postmaster_pid(self) -> int:
        """The running server's first process, whose children are every other one."""
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def terminate_every_session(self) -> int:
        with psycopg.connect(self.admin_url(), autocommit=True) as conn:
            return conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()[0]

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
