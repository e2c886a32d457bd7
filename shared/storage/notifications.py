"""LISTEN on a channel over a dedicated connection (a pooled one would be handed to other work)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
from psycopg import sql

from shared.storage.database import translate_db_errors

# Wakes workers when jobs are inserted; folded to one notification per transaction.
RUNNABLE_CHANNEL = "jobs_runnable"


async def listen(database_url: str, channel: str) -> AsyncIterator[str]:
    """Yields "" once listening starts, then each notification's payload; raises Unavailable when
    the connection fails (the caller reconnects, and must assume it missed notifications)."""
    with translate_db_errors():
        async with await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, application_name="jobs-listener"
        ) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            yield ""
            async for notify in conn.notifies():
                yield notify.payload
