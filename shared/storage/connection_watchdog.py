"""Gives up on database connections that stopped answering, and on the servers behind them.

A server that hangs (its processes stopped, its storage stalled, its kernel stuck) keeps every TCP connection
open, and its kernel still acknowledges what is sent and answers keepalives: neither the socket nor the TCP
settings can tell it from a slow server, and asking it to cancel a statement (psycopg's path when a wait is
interrupted) waits on it too. Only an answer tells. So:

- every use of a connection is bounded (`answered_within`): when the bound passes, the connection's socket is
  shut down, and whatever waits on it fails at once with a connection error;
- a connection busy for a while makes the watch ask its server, on a fresh connection, whether it answers at
  all. A server that does not is *silent*: every connection to it is given up at once (busy ones fail, idle
  ones leave the pool) and new connections try it last, so a multi-host URL reaches the promoted standby
  without first waiting out the silent one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.domain.errors import DatabaseUnreachable, Unavailable
from shared.storage import queries

log = logging.getLogger(__name__)

AnyConnection = psycopg.AsyncConnection[Any]
# (host, port) as libpq reports them for an open connection: one server of a multi-host URL.
ServerAddress = tuple[str, str]

# After a transaction's deadline, how long its server has to report its own cancellation (statement_timeout)
# before the connection is given up: a server that cannot even say that has stopped answering.
ANSWER_GRACE_SECONDS = 1.0
# A connection busy this long makes the watch ask its server whether it answers at all. Statements here
# take milliseconds; the question costs one short connection, at most once per CHECK_INTERVAL per server.
SUSPECT_AFTER_SECONDS = 1.0
CHECK_INTERVAL_SECONDS = 1.0
# How long a fresh connection and `SELECT 1` may take before the server counts as silent. Generous against
# a busy machine: a false verdict costs the in-flight transactions of this process (answered UNAVAILABLE).
CHECK_SECONDS = 3.0
DEFAULT_PORT = "5432"
# Connection parameters that choose among servers: a check asks one given server, whatever its role.
_SERVER_CHOICE_PARAMETERS = ("hostaddr", "target_session_attrs", "load_balance_hosts")


def server_of(conn: AnyConnection) -> ServerAddress | None:
    """The server `conn` is connected to; None once it is closed."""
    if conn.closed:
        return None
    return conn.info.host, str(conn.info.port)


def abandon(conn: AnyConnection) -> None:
    """Shuts the connection's socket down without waiting for anything: a statement in flight and every
    later use fail at once, and the pool discards the connection when it comes back. The server, if it
    ever answers again, sees the client gone and rolls back."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return  # closed already
    # A duplicate of the descriptor: shutting it down ends the connection for libpq too, and closing the
    # duplicate leaves libpq's own descriptor for psycopg to close.
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


@dataclass
class AnswerBound:
    """An `answered_within` block: how long it had, and why its connection was given up, if it was."""

    conn: AnyConnection
    seconds: float
    given_up: str | None = None

    def give_up(self, why: str) -> None:
        """Abandons the connection now; the block's database error is then raised as DatabaseUnreachable(why)."""
        if self.given_up is None:
            self.given_up = why
            abandon(self.conn)


@contextlib.contextmanager
def answered_within(conn: AnyConnection, seconds: float) -> Iterator[AnswerBound]:
    """Gives `conn` up (`abandon`) unless the block ends within `seconds`; the block's database error is
    then raised as DatabaseUnreachable, saying why."""
    bound = AnswerBound(conn, seconds)
    why = f"the database did not answer within {seconds:.1f}s; its connection was given up"
    timer = asyncio.get_running_loop().call_later(max(seconds, 0.0), bound.give_up, why)
    try:
        yield bound
    except psycopg.Error as exc:
        if bound.given_up is not None:
            raise DatabaseUnreachable(bound.given_up) from exc
        raise
    finally:
        timer.cancel()


class SilenceWatch:
    """Knows which servers stopped answering. One per process's database: the pool's transactions, the health
    probe and the LISTEN sessions report to it."""

    def __init__(
        self,
        url: str,
        application_name: str,
        *,
        on_silence: Callable[[], Awaitable[None]] | None = None,
        suspect_after_seconds: float = SUSPECT_AFTER_SECONDS,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        """`url` is what the checks connect with (to one server of it at a time); `on_silence` runs once a
        server is found silent, after its busy connections were given up (the pool drains its idle ones)."""
        self._url = url
        self._application_name = f"{application_name}-check"
        self._on_silence = on_silence
        self._suspect_after = suspect_after_seconds
        self._check_seconds = check_seconds
        self._busy: dict[AnyConnection, tuple[ServerAddress, AnswerBound]] = {}
        self._silent: set[ServerAddress] = set()
        self._checks: dict[ServerAddress, asyncio.Task[None]] = {}
        self._checked_at: dict[ServerAddress, float] = {}

    def conninfo(self, url: str) -> str:
        """`url` with the servers found silent moved to the end of its host list: libpq tries hosts in
        order, and each silent one would cost its whole connect_timeout before the next is tried."""
        if not self._silent or "," not in url:
            return url
        return with_servers_last(url, self._silent)

    def connected(self, conn: AnyConnection) -> None:
        """A new connection was made: its server answers again."""
        server = server_of(conn)
        if server in self._silent:
            self._silent.discard(server)
            log.info("database server %s:%s answers again", *server)

    async def configure(self, conn: AnyConnection) -> None:
        """The pool's `configure` callback."""
        self.connected(conn)

    @contextlib.contextmanager
    def using(self, conn: AnyConnection, seconds: float) -> Iterator[AnswerBound]:
        """A use of `conn` that must end within `seconds` (`answered_within`). Busy longer than the
        suspicion delay, it has the watch check its server; if the server is found silent meanwhile, the
        connection is given up with every other one to it."""
        server = server_of(conn)
        if server is None:
            raise Unavailable("the database connection is closed")
        suspicion = asyncio.get_running_loop().call_later(self._suspect_after, self.suspect, server)
        try:
            with answered_within(conn, seconds) as bound:
                self._busy[conn] = (server, bound)
                if server in self._silent:
                    bound.give_up(_silent_server(server))  # made just before its server was found silent
                yield bound
        finally:
            suspicion.cancel()
            self._busy.pop(conn, None)

    def suspect(self, server: ServerAddress | None) -> None:
        """Has the server checked, unless a check is running or ran a moment ago."""
        if server is None or server in self._checks:
            return
        if time.monotonic() - self._checked_at.get(server, -math.inf) < CHECK_INTERVAL_SECONDS:
            return
        self._checked_at[server] = time.monotonic()
        task = asyncio.get_running_loop().create_task(
            self._check(server), name=f"database-check-{server[0]}:{server[1]}"
        )
        self._checks[server] = task
        task.add_done_callback(lambda _: self._checks.pop(server, None))

    async def _check(self, server: ServerAddress) -> None:
        if await self._answers(server):
            return
        log.warning(
            "database server %s:%s did not answer within %.1fs: giving up every connection to it",
            *server,
            self._check_seconds,
        )
        self._silent.add(server)
        for busy_on, bound in list(self._busy.values()):
            if busy_on == server:
                bound.give_up(_silent_server(server))
        if self._on_silence is not None:
            await self._on_silence()

    async def _answers(self, server: ServerAddress) -> bool:
        """Whether the server answers a fresh connection's `SELECT 1` in time. An error it sends (too many
        clients, a refused login) is an answer too; only a timeout or a failure to connect is not."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._check_seconds):
                conn = await psycopg.AsyncConnection.connect(self._check_conninfo(server), autocommit=True)
            async with conn:
                with answered_within(conn, self._check_seconds - (time.monotonic() - started)):
                    await conn.execute(queries.SESSION_ALIVE)
        except psycopg.Error as exc:
            return exc.sqlstate is not None
        except (OSError, TimeoutError, Unavailable):
            return False
        return True

    def _check_conninfo(self, server: ServerAddress) -> str:
        params = {k: v for k, v in conninfo_to_dict(self._url).items() if k not in _SERVER_CHOICE_PARAMETERS}
        params.update(
            host=server[0],
            port=server[1],
            connect_timeout=str(max(2, math.ceil(self._check_seconds))),
            application_name=self._application_name,
        )
        return make_conninfo("", **params)

    async def close(self) -> None:
        checks = list(self._checks.values())
        for check in checks:
            check.cancel()
        await asyncio.gather(*checks, return_exceptions=True)


def _silent_server(server: ServerAddress) -> str:
    return f"the database server {server[0]}:{server[1]} stopped answering; its connections were given up"


def with_servers_last(url: str, servers: set[ServerAddress]) -> str:
    """`url` (a libpq URL or connection string, one host or several) with the hosts in `servers` moved
    behind the others, each keeping its port (and hostaddr), the rest unchanged."""
    params = conninfo_to_dict(url)
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        return url
    ports = str(params.get("port") or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    addresses = str(params["hostaddr"]).split(",") if params.get("hostaddr") else None
    entries = list(zip(hosts, [p or DEFAULT_PORT for p in ports], addresses or hosts, strict=False))
    entries.sort(key=lambda entry: (entry[0], entry[1]) in servers)
    params["host"] = ",".join(entry[0] for entry in entries)
    params["port"] = ",".join(entry[1] for entry in entries)
    if addresses is not None:
        params["hostaddr"] = ",".join(entry[2] for entry in entries)
    return make_conninfo("", **params)
