"""A PgBouncer of the test's own in front of a PostgreSQL server, on a loopback port, in transaction
pooling mode (the mode large fleets use, and the one that breaks session state). It runs as an
unprivileged OS user, as PgBouncer refuses root; its admin console answers on the database `pgbouncer`."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

UNPRIVILEGED_USER = "postgres"
START_TIMEOUT_SECONDS = 30
# Fewer server connections than the services open client connections, so transactions of different
# clients really do share server sessions.
SERVER_POOL_SIZE = 4


def _program() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found is None:
        raise RuntimeError("pgbouncer is not installed (make system-deps installs it)")
    return found


class PrivatePgBouncer:
    def __init__(self, port: int, upstream_host: str, upstream_port: int, users: list[str]) -> None:
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="jobs-pgbouncer-"))
        self.log = self.root / "pgbouncer.log"
        self._as_user: list[str] = []
        ini = self.root / "pgbouncer.ini"
        userlist = self.root / "userlist.txt"
        # trust still requires every user to be listed; the server behind trusts loopback itself.
        userlist.write_text("".join(f'"{user}" ""\n' for user in users))
        ini.write_text(
            "[databases]\n"
            f"* = host={upstream_host} port={upstream_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {port}\n"
            f"unix_socket_dir = {self.root}\n"
            "auth_type = trust\n"
            f"auth_file = {userlist}\n"
            f"admin_users = {users[0]}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {SERVER_POOL_SIZE}\n"
            "max_client_conn = 1000\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        if os.geteuid() == 0:
            account = pwd.getpwnam(UNPRIVILEGED_USER)
            for path in (self.root, ini, userlist):
                os.chown(path, account.pw_uid, account.pw_gid)
            self._as_user = ["runuser", "-u", UNPRIVILEGED_USER, "--"]
        self._popen = subprocess.Popen(
            [*self._as_user, _program(), str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._wait_until_it_answers(users[0])

    def url(self, user: str, database: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def _wait_until_it_answers(self, admin: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self._popen.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self._popen.returncode}:\n{self.log_tail()}")
            try:
                self.show(admin, "VERSION")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    message = f"pgbouncer did not answer in {START_TIMEOUT_SECONDS}s:\n{self.log_tail()}"
                    raise RuntimeError(message) from exc
                time.sleep(0.1)

    def show(self, admin: str, what: str) -> list[dict]:
        """A SHOW command of the admin console (CLIENTS, POOLS, STATS, ...), as rows."""
        # The admin console speaks only the simple query protocol, which ClientCursor uses.
        with psycopg.connect(
            self.url(admin, "pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cur = conn.execute(f"SHOW {what}")
            names = [column.name for column in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self._popen.poll() is None:
            self._popen.terminate()
            try:
                self._popen.wait(10)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)
