"""Health's database check: a busy pool is not a database that is down."""

from __future__ import annotations

import asyncio

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
