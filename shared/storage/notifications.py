"""LISTEN on a channel over a dedicated connection: a pooled one would be handed to other work, and
through a transaction pooler the LISTEN would stay behind on a server session that other clients use."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from shared.domain.errors import Unavailable
from shared.storage import queries
from shared.storage.connection_watchdog import SilenceWatch, answered_within, server_of
from shared.storage.database import Connection, translate_db_errors, with_connection_defaults

# Wakes workers when jobs are inserted; folded to one notification per transaction.
RUNNABLE_CHANNEL = "jobs_runnable"
# A running job was cancelled or superseded; payload: its job id.
STOP_CHANNEL = "jobs_stop"
# Any transition; payload: "<job id>:<sequence>" entries joined by "," (one notification per statement
# and up to 100 jobs, see 0020_statement_history.sql). WatchJob streams wait on it.
CHANGED_CHANNEL = "jobs_changed"
# What `listen` yields once it is listening: everything before this may have been missed.
LISTENING = ("", "")
# How often a listening session proves that its server answers, and how long the answer may take.
CHECK_SECONDS = 5.0
ANSWER_SECONDS = 3.0


async def listen(
    database_url: str, *channels: str, watch: SilenceWatch | None = None
) -> AsyncGenerator[tuple[str, str], None]:
    """Yields LISTENING once listening starts, then (channel, payload) per notification; raises
    Unavailable when the connection fails (the caller reconnects and must assume it missed some).
    `database_url` must reach the primary without a transaction pooler between: a standby delivers no
    notifications, and a pooler would move the LISTEN's session away from this client.

    A connection that only listens sends nothing, so a server that hung would keep it waiting forever: every
    CHECK_SECONDS it asks its server whether it still answers and takes writes, and gives it up otherwise.
    With `watch`, it connects to silent servers last, and reports one it finds silent."""
    url = with_connection_defaults(database_url)
    with translate_db_errors():
        async with await psycopg.AsyncConnection.connect(
            url if watch is None else watch.conninfo(url), autocommit=True, application_name="jobs-listener"
        ) as conn:
            if watch is not None:
                watch.connected(conn)
            with _answered(conn, watch):
                for channel in channels:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            yield LISTENING
            while True:
                async for notify in conn.notifies(timeout=CHECK_SECONDS):
                    yield notify.channel, notify.payload
                with _answered(conn, watch):
                    row = await (await conn.execute(queries.SESSION_PING)).fetchone()
                if not (row and row[0]):
                    raise Unavailable("the listening session's server no longer takes writes")


@contextmanager
def _answered(conn: psycopg.AsyncConnection[Any], watch: SilenceWatch | None) -> Iterator[None]:
    server = server_of(conn)
    with answered_within(conn, ANSWER_SECONDS) as bound:
        try:
            yield
        finally:
            if bound.given_up is not None and watch is not None:
                watch.suspect(server)


async def register_change_watcher(conn: Connection, listener: str, seconds: float) -> None:
    """Statements notify CHANGED_CHANNEL for the next `seconds` (0027_notify_changes_only_while_watched.sql)."""
    await conn.execute(queries.CHANGE_WATCHER_REGISTER, {"listener": listener, "seconds": seconds})
