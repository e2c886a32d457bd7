"""Database.transaction on the pool's autocommit connections: a block is one transaction, its tenant and
deadline hold for every statement in it and end with it, and a failed block writes nothing. And
Database.run_alone, one statement in a transaction of its own, held to the same bounds."""

from __future__ import annotations

import datetime

import psycopg
import psycopg.rows
import pytest

from shared.domain.errors import DeadlineExceeded
from shared.storage.database import Database, PoolSettings, call_deadline, savepoint

pytestmark = pytest.mark.timeout(30)

_SETTINGS = "SELECT current_setting('jobs.tenant', true) AS tenant, current_setting('statement_timeout') AS timeout"


@pytest.fixture
async def one_connection(database_url: str):
    """A pool of one connection, so that consecutive transactions share it."""
    db = await Database.open(PoolSettings(database_url, min_size=1, max_size=1), wait=True)
    with psycopg.connect(database_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE scratch (n integer)")
    try:
        yield db
    finally:
        await db.close()


async def _settings(db: Database) -> dict[str, str | None]:
    async with db.transaction() as conn:
        return dict(await (await conn.execute(_SETTINGS)).fetchone() or {})


async def test_the_tenant_and_the_deadline_hold_for_every_statement_and_end_with_the_transaction(
    one_connection: Database,
) -> None:
    with call_deadline(5.0):
        async with one_connection.transaction(tenant="acme") as conn:
            await conn.execute("SELECT 1")
            first, second = [dict(await (await conn.execute(_SETTINGS)).fetchone() or {}) for _ in range(2)]
    for seen in (first, second):
        assert seen["tenant"] == "acme"
        assert seen["timeout"] not in ("0", None)
    after = await _settings(one_connection)
    assert after["tenant"] == ""
    assert after["timeout"] != first["timeout"], "the caller's deadline outlived its transaction"


async def test_a_failed_block_writes_nothing_and_the_connection_serves_again(one_connection: Database) -> None:
    with pytest.raises(RuntimeError):
        async with one_connection.transaction() as conn:
            await conn.execute("INSERT INTO scratch VALUES (1)")
            raise RuntimeError("the block fails")
    async with one_connection.transaction() as conn:
        await conn.execute("INSERT INTO scratch VALUES (2)")
    async with one_connection.transaction() as conn:
        rows = await (await conn.execute("SELECT n FROM scratch ORDER BY n")).fetchall()
    assert [r["n"] for r in rows] == [2]


async def test_a_savepoint_undoes_only_its_own_work(one_connection: Database) -> None:
    async with one_connection.transaction() as conn:
        await conn.execute("INSERT INTO scratch VALUES (1)")
        with pytest.raises(psycopg.errors.DivisionByZero):
            async with conn.transaction():
                await conn.execute("INSERT INTO scratch VALUES (2)")
                await conn.execute("SELECT 1 / 0")
        async with savepoint(conn):
            await conn.execute("INSERT INTO scratch VALUES (3)")
    async with one_connection.transaction() as conn:
        rows = await (await conn.execute("SELECT n FROM scratch ORDER BY n")).fetchall()
    assert [r["n"] for r in rows] == [1, 3]


async def test_a_statement_run_alone_has_the_tenant_and_the_deadline_and_they_end_with_it(
    one_connection: Database,
) -> None:
    with call_deadline(5.0):
        (seen,) = await one_connection.run_alone(_SETTINGS, {}, tenant="acme")
    assert seen["tenant"] == "acme"
    assert seen["timeout"] not in ("0", None)
    after = await _settings(one_connection)
    assert after["tenant"] == ""
    assert after["timeout"] != seen["timeout"], "the statement's bound outlived its transaction"


async def test_a_statement_run_alone_is_committed_when_its_rows_come_back(
    one_connection: Database, database_url: str
) -> None:
    rows = await one_connection.run_alone("INSERT INTO scratch VALUES (%(n)s) RETURNING n", {"n": 7})
    assert [r["n"] for r in rows] == [7]
    with psycopg.connect(database_url) as elsewhere:
        assert elsewhere.execute("SELECT n FROM scratch").fetchall() == [(7,)]


async def test_a_statement_run_alone_past_its_deadline_is_cancelled_writes_nothing_and_the_connection_serves_again(
    one_connection: Database,
) -> None:
    with call_deadline(1.0), pytest.raises(DeadlineExceeded):
        await one_connection.run_alone("INSERT INTO scratch SELECT 1 FROM pg_sleep(20)", {})
    await one_connection.run_alone("INSERT INTO scratch VALUES (2)", {})
    rows = await one_connection.run_alone("SELECT n FROM scratch ORDER BY n", {})
    assert [r["n"] for r in rows] == [2]


async def test_utc_sessions_read_each_timestamp_as_the_same_instant_in_utc(database_url: str) -> None:
    """A worker's pool (utc_sessions) reads timestamps built in datetime's own UTC, whatever the server's
    zone; the same instant as a pool in the server's zone reads."""
    statement = "SELECT current_setting('TimeZone') AS zone, TIMESTAMPTZ '2026-12-05 02:15:00.5+01' AS at"
    plain = await Database.open(PoolSettings(database_url, min_size=1, max_size=1), wait=True)
    utc = await Database.open(PoolSettings(database_url, min_size=1, max_size=1, utc_sessions=True), wait=True)
    try:
        (in_server_zone,) = await plain.run_alone(statement, {})
        (in_utc,) = await utc.run_alone_as(psycopg.rows.dict_row, statement, {}, binary=True)
    finally:
        await plain.close()
        await utc.close()
    assert in_utc["zone"] == "UTC"
    assert in_utc["at"].tzinfo is datetime.UTC
    assert in_utc["at"] == in_server_zone["at"] == datetime.datetime(2026, 12, 5, 1, 15, 0, 500000, datetime.UTC)
