"""JOBS_FAULT_INJECTION: statements that fail on purpose in the storage layer, before they are sent or
after their transaction committed (the lost COMMIT reply), as the indeterminate `Unavailable` the
contract promises for both."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from shared.domain.errors import Unavailable
from shared.env_settings import SettingsError
from shared.storage.connection_watchdog import SilenceWatch
from shared.storage.database import Connection, Database
from shared.storage.database_settings import DatabaseSettings
from shared.storage.fault_injection import StatementFaults, pool_connection_kwargs

pytestmark = pytest.mark.timeout(60)

INSERT_ACTION = "INSERT INTO admin_actions (actor, action) VALUES (%(actor)s, 'fault-injection-test')"
COUNT_ACTIONS = "SELECT count(*) FROM admin_actions WHERE actor = %s"


class ScriptedRandom(random.Random):
    """Answers `random()` from a script, then never picks again."""

    def __init__(self, script: Sequence[float]) -> None:
        super().__init__(0)
        self._script = list(script)

    def random(self) -> float:
        return self._script.pop(0) if self._script else 0.999


async def _open(database_url: str, faults: StatementFaults, *, autocommit: bool = False) -> Database:
    """As Database.open, with faults whose choices the test scripts."""
    watch = SilenceWatch(database_url, "jobs-tests")
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        database_url,
        connection_class=Connection,
        min_size=1,
        max_size=2,
        kwargs={"row_factory": dict_row, "autocommit": autocommit, **pool_connection_kwargs(faults)},
        configure=watch.configure,
        open=False,
    )
    await pool.open(wait=True)
    return Database(pool, watch, faults=faults)


def _actions(database_url: str, actor: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(COUNT_ACTIONS, (actor,)).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_statement_picked_to_fail_before_it_runs_writes_nothing(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Picked (0.0 < fraction), then not the lost-reply half (0.9): the statement is never sent.
    db = await _open(database_url, StatementFaults(0.1, ScriptedRandom([0.0, 0.9])))
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(Unavailable):
            async with db.transaction() as conn:
                await conn.execute(INSERT_ACTION, {"actor": "not-sent"})
        assert _actions(database_url, "not-sent") == 0
        assert "injected fault: statement_not_sent" in caplog.messages
        # The connection is as good as before: the next transaction goes through.
        async with db.transaction() as conn:
            await conn.execute(INSERT_ACTION, {"actor": "after"})
        assert _actions(database_url, "after") == 1
    finally:
        await db.close()


async def test_a_lost_commit_reply_commits_and_still_answers_unavailable(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Picked, and the lost-reply half (0.1 < 0.5): the transaction commits, its caller hears it failed.
    db = await _open(database_url, StatementFaults(0.1, ScriptedRandom([0.0, 0.1])))
    try:
        with caplog.at_level(logging.WARNING), pytest.raises(Unavailable):
            async with db.transaction() as conn:
                await conn.execute(INSERT_ACTION, {"actor": "reply-lost"})
                await conn.execute(INSERT_ACTION, {"actor": "reply-lost"})
        assert _actions(database_url, "reply-lost") == 2
        assert "injected fault: commit_reply_lost" in caplog.messages
    finally:
        await db.close()


async def test_a_statement_run_alone_fails_as_a_transaction_does_when_picked(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Only the statement is ever picked (the bounds beside it never are): not sent (0.9), then its reply
    # lost (0.1).
    db = await _open(database_url, StatementFaults(0.1, ScriptedRandom([0.0, 0.9, 0.0, 0.1])), autocommit=True)
    try:
        with caplog.at_level(logging.WARNING):
            with pytest.raises(Unavailable):
                await db.run_alone(INSERT_ACTION, {"actor": "alone-not-sent"})
            with pytest.raises(Unavailable):
                await db.run_alone(INSERT_ACTION, {"actor": "alone-reply-lost"})
        assert (_actions(database_url, "alone-not-sent"), _actions(database_url, "alone-reply-lost")) == (0, 1)
        assert caplog.messages.count("injected fault: statement_not_sent") == 1
        assert caplog.messages.count("injected fault: commit_reply_lost") == 1
        await db.run_alone(INSERT_ACTION, {"actor": "alone-after"})
        assert _actions(database_url, "alone-after") == 1
    finally:
        await db.close()


async def test_a_transaction_that_fails_anyway_loses_no_reply_it_never_got(database_url: str) -> None:
    """A statement marked for a lost reply whose transaction then rolls back leaves no mark on the next one."""
    db = await _open(database_url, StatementFaults(0.1, ScriptedRandom([0.0, 0.1])))
    try:
        with pytest.raises(ZeroDivisionError):
            async with db.transaction() as conn:
                await conn.execute(INSERT_ACTION, {"actor": "rolled-back"})
                raise ZeroDivisionError
        async with db.transaction() as conn:
            await conn.execute(INSERT_ACTION, {"actor": "next"})
        assert (_actions(database_url, "rolled-back"), _actions(database_url, "next")) == (0, 1)
    finally:
        await db.close()


async def test_unpicked_statements_run_untouched(database_url: str) -> None:
    db = await _open(database_url, StatementFaults(0.5, ScriptedRandom([])))
    try:
        for _ in range(20):
            async with db.transaction() as conn:
                await conn.execute(INSERT_ACTION, {"actor": "untouched"})
        assert _actions(database_url, "untouched") == 20
    finally:
        await db.close()


def test_the_setting_is_off_unless_set_and_bounded() -> None:
    base = {"DATABASE_URL": "postgresql://db/jobs"}
    assert DatabaseSettings.from_env(base).fault_injection == 0.0
    assert StatementFaults.from_fraction(0.0) is None
    assert DatabaseSettings.from_env({**base, "JOBS_FAULT_INJECTION": "0.01"}).fault_injection == 0.01
    for bad in ("-0.1", "0.9", "often"):
        with pytest.raises(SettingsError, match="JOBS_FAULT_INJECTION"):
            DatabaseSettings.from_env({**base, "JOBS_FAULT_INJECTION": bad})
