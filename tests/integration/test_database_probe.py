"""Health's database check: a busy pool is not a database that is down; a read-only one is."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from shared.storage.database import Database, PoolSettings
from tests.process_fixtures import free_port

pytestmark = pytest.mark.timeout(30)


async def test_the_database_answers_while_every_pooled_connection_is_busy(database_url: str) -> None:
    db = await Database.open(PoolSettings(database_url, min_size=1, max_size=2), wait=True)
    release, both_held = asyncio.Event(), asyncio.Event()
    holding = 0

    async def hold() -> None:
        nonlocal holding
        async with db.transaction() as conn:
            await conn.execute("SELECT 1")
            holding += 1
            if holding == 2:
                both_held.set()
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(2)]
    try:
        await asyncio.wait_for(both_held.wait(), 10)
        assert await db.ping(timeout_seconds=1.0)
    finally:
        release.set()
        await asyncio.gather(*holders)
        await db.close()


async def test_an_unreachable_database_does_not_answer() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere?connect_timeout=1"
    db = await Database.open(PoolSettings(url, min_size=1, max_size=2))
    try:
        assert not await db.ping(timeout_seconds=1.0)
    finally:
        await db.close()


async def test_a_database_that_stopped_taking_writes_is_not_ready(database_url: str) -> None:
    """A demoted or fenced primary still answers SELECT 1; readiness must not send writes to it."""
    db = await Database.open(PoolSettings(database_url, min_size=1, max_size=2), wait=True)
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    try:
        assert await db.ping(timeout_seconds=5.0)
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        # The first ping may meet a terminated connection; the next one opens a fresh, read-only session.
        await db.ping(timeout_seconds=5.0)
        assert not await db.ping(timeout_seconds=5.0)
        with psycopg.connect(database_url, autocommit=True, options="-c default_transaction_read_only=off") as admin:
            admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        assert await db.ping(timeout_seconds=5.0)
    finally:
        await db.close()
