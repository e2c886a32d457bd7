"""LISTEN on a channel over a dedicated connection: a pooled one would be handed to other work, and
through a transaction pooler the LISTEN would stay behind on a server session that other clients use."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
from psycopg import sql

from shared.storage import queries
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


async def listen(database_url: str, *channels: str) -> AsyncIterator[tuple[str, str]]:
    """Yields LISTENING once listening starts, then (channel, payload) per notification; raises
    Unavailable when the connection fails (the caller reconnects and must assume it missed some).
    `database_url` must reach the primary without a transaction pooler between: a standby delivers no
    notifications, and a pooler would move the LISTEN's session away from this client."""
    with translate_db_errors():
        async with await psycopg.AsyncConnection.connect(
            with_connection_defaults(database_url), autocommit=True, application_name="jobs-listener"
        ) as conn:
            for channel in channels:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            yield LISTENING
            async for notify in conn.notifies():
                yield notify.channel, notify.payload


async def register_change_watcher(conn: Connection, listener: str, seconds: float) -> None:
    """Statements notify CHANGED_CHANNEL for the next `seconds` (0027_notify_changes_only_while_watched.sql)."""
    await conn.execute(queries.CHANGE_WATCHER_REGISTER, {"listener": listener, "seconds": seconds})
