"""A database server that hangs instead of dying: its connections stay open, its kernel acknowledges what
is sent, and nothing ever answers. Reached through a relay that falls silent exactly so
(tests/silent_proxy.py), in front of the test's real database.

The storage layer must give up on such a server by itself, well within a caller's deadline: transactions
answer UNAVAILABLE, the health ping says no within its own timeout (never waiting in psycopg's cancel
path, which asks the silent server too), a multi-host pool goes on with the next server without trying
the silent one first, and a session that only listens notices as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from shared.domain.errors import Unavailable
from shared.storage.connection_watchdog import CHECK_SECONDS, SUSPECT_AFTER_SECONDS, with_servers_last
from shared.storage.database import Database, PoolSettings, call_deadline
from shared.storage.notifications import ANSWER_SECONDS, LISTENING, listen
from shared.storage.notifications import CHECK_SECONDS as LISTEN_CHECK_SECONDS
from tests.conditions import wait_until
from tests.silent_proxy import SilentableProxy

pytestmark = pytest.mark.timeout(90)

# A caller's deadline far beyond the time the watch needs to find a server silent (its suspicion, then a
# check that gets no answer): an answer before half of it came from the watch, not from the deadline.
CALLER_DEADLINE_SECONDS = 4 * (SUSPECT_AFTER_SECONDS + CHECK_SECONDS)


def _proxy_to(database_url: str) -> SilentableProxy:
    upstream = urlsplit(database_url)
    return SilentableProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)


def _through(database_url: str, *proxies: SilentableProxy) -> str:
    """The test database's URL with the relays as its hosts, in order."""
    upstream = urlsplit(database_url)
    hosts = ",".join(f"127.0.0.1:{proxy.port}" for proxy in proxies)
    return f"postgresql://{upstream.username}@{hosts}{upstream.path}?sslmode=disable&connect_timeout=2"


@pytest.fixture
def proxies(database_url: str) -> Iterator[tuple[SilentableProxy, SilentableProxy]]:
    first, second = _proxy_to(database_url), _proxy_to(database_url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


async def _open(url: str) -> Database:
    return await Database.open(PoolSettings(url, min_size=1, max_size=3, acquire_timeout_seconds=1.0), wait=True)


async def _select_one(db: Database, *, alone: bool = False) -> None:
    """In a transaction, or as a statement in a transaction of its own (Database.run_alone)."""
    with call_deadline(CALLER_DEADLINE_SECONDS):
        if alone:
            await db.run_alone("SELECT 1", {})
            return
        async with db.transaction() as conn:
            await conn.execute("SELECT 1")


@pytest.mark.parametrize("alone", [False, True], ids=["transaction", "statement_alone"])
async def test_a_transaction_on_a_silent_server_is_answered_unavailable_long_before_its_deadline(
    database_url: str, proxies: tuple[SilentableProxy, SilentableProxy], alone: bool
) -> None:
    proxy, _ = proxies
    db = await _open(_through(database_url, proxy))
    try:
        await _select_one(db, alone=alone)
        proxy.fall_silent()
        async with asyncio.timeout(CALLER_DEADLINE_SECONDS / 2):
            with pytest.raises(Unavailable):
                await _select_one(db, alone=alone)
            with pytest.raises(Unavailable):  # no connection to the silent server is handed out again
                await _select_one(db, alone=alone)
        proxy.speak_again()
        await _await_service(db)
    finally:
        await db.close()


async def test_the_health_ping_of_a_silent_server_says_no_within_its_own_timeout(
    database_url: str, proxies: tuple[SilentableProxy, SilentableProxy]
) -> None:
    proxy, _ = proxies
    db = await _open(_through(database_url, proxy))
    try:
        assert await db.ping(timeout_seconds=1.0)
        proxy.fall_silent()
        # psycopg's cancel path would ask the silent server to cancel, and wait for it, for ten seconds.
        async with asyncio.timeout(5.0):
            assert not await db.ping(timeout_seconds=1.0)
        proxy.speak_again()
        async with asyncio.timeout(10.0):
            # The server's answer is the condition: no event carries it.
            while not await db.ping(timeout_seconds=1.0):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
    finally:
        await db.close()


async def test_a_multi_host_pool_goes_on_with_the_next_server_and_tries_the_silent_one_last(
    database_url: str, proxies: tuple[SilentableProxy, SilentableProxy]
) -> None:
    first, second = proxies
    db = await _open(_through(database_url, first, second))
    try:
        await _select_one(db)
        assert second.accepted == 0, "libpq tries the hosts in order"
        first.fall_silent()
        await _await_service(db)
        tried_first = first.accepted
        # As many transactions at once as the pool holds connections: new ones are made, and each would
        # wait out its connect_timeout on the silent server if it still tried that one first.
        hold = asyncio.Event()

        async def held() -> None:
            with call_deadline(CALLER_DEADLINE_SECONDS):
                async with db.transaction() as conn:
                    await conn.execute("SELECT 1")
                    await hold.wait()

        holders = [asyncio.create_task(held()) for _ in range(3)]
        await wait_until(
            lambda: db.stats()["pool_size"] == 3, within_seconds=CALLER_DEADLINE_SECONDS, what="3 connections"
        )
        hold.set()
        await asyncio.gather(*holders)
        assert first.accepted == tried_first, "a new connection tried the silent server"
    finally:
        await db.close()


async def _await_service(db: Database) -> None:
    """Transactions until one succeeds: the first ones may meet connections the watch has not given up yet."""
    async with asyncio.timeout(CALLER_DEADLINE_SECONDS):
        while True:
            try:
                await _select_one(db)
                return
            except Unavailable:
                await asyncio.sleep(0.1)


async def test_a_session_that_only_listens_notices_its_server_fell_silent(
    database_url: str, proxies: tuple[SilentableProxy, SilentableProxy]
) -> None:
    proxy, _ = proxies
    notifications = listen(_through(database_url, proxy), "jobs_silence_probe")
    try:
        assert await anext(notifications) == LISTENING
        proxy.fall_silent()
        async with asyncio.timeout(2 * (LISTEN_CHECK_SECONDS + ANSWER_SECONDS)):
            with pytest.raises(Unavailable):
                await anext(notifications)
    finally:
        await notifications.aclose()


def test_silent_servers_are_moved_behind_the_others_each_with_its_port() -> None:
    url = "postgresql://app@db-a:5433,db-b,db-c:5435/jobs?target_session_attrs=read-write"
    reordered = with_servers_last(url, {("db-a", "5433"), ("db-b", "5432")})
    assert "host=db-c,db-a,db-b" in reordered and "port=5435,5433,5432" in reordered
    assert "target_session_attrs=read-write" in reordered
    assert with_servers_last("postgresql://app@db-a/jobs", {("db-a", "5432")}) == "postgresql://app@db-a/jobs"


async def test_the_watch_does_not_give_up_on_a_server_that_is_only_slow(database_url: str) -> None:
    db = await _open(database_url)
    try:
        with call_deadline(CALLER_DEADLINE_SECONDS):
            async with db.transaction() as conn:
                # Longer than the suspicion delay and the check: the check is answered, nothing is given up.
                await conn.execute("SELECT pg_sleep(%s)", (SUSPECT_AFTER_SECONDS + 1.5,))
        await _select_one(db)
    finally:
        await db.close()
