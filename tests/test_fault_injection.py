"""JOBS_FAULT_INJECTION: statements that fail on purpose in the storage layer, before they are sent or
after their transaction committed (the lost COMMIT reply), as the indeterminate `Unavailable` the
contract promises for both."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from shared.domain.errors import Unavailable
from shared.env_settings import SettingsError
from shared.storage.database import Connection, Database
from shared.storage.database_settings import DatabaseSettings
from shared.storage.fault_injection import StatementFaults, pool_connection_kwargs
from tests.acknowledged_load import OPEN_JOBS, Ledger, audit, client_loop, count
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = pytest.mark.timeout(60)

INSERT_ACTION = "INSERT INTO admin_actions (actor, action) VALUES (%(actor)s, 'fault-injection-test')"
COUNT_ACTIONS = "SELECT count(*) FROM admin_actions WHERE actor = %s"
LOAD_SECONDS = 30.0


class ScriptedRandom(random.Random):
    """Answers `random()` from a script, then never picks again."""

    def __init__(self, script: Sequence[float]) -> None:
        super().__init__(0)
        self._script = list(script)

    def random(self) -> float:
        return self._script.pop(0) if self._script else 0.999


async def _open(database_url: str, faults: StatementFaults) -> Database:
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        database_url,
        connection_class=Connection,
        min_size=1,
        max_size=2,
        kwargs={"row_factory": dict_row, **pool_connection_kwargs(faults)},
        open=False,
    )
    await pool.open(wait=True)
    return Database(pool, faults=faults)


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


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_with_statements_failing_on_purpose_every_acknowledged_job_runs_and_publishes_once(
    service_stack: ServiceStack,
) -> None:
    """The API and two workers from their entry points with JOBS_FAULT_INJECTION on (5%, well above the
    chaos run's 1%): clients resubmit indeterminate answers with their keys, as the contract says, and
    every acknowledged job exists once, succeeds, and has one result; both kinds of fault struck in
    every process."""
    faults = {"JOBS_FAULT_INJECTION": "0.05"}
    api = service_stack.start_api(**faults)
    workers = [service_stack.start_worker(name, JOBS_WORKER_CONCURRENCY="4", **faults) for name in ("w1", "w2")]
    ledger = Ledger()
    stop_at = time.monotonic() + LOAD_SECONDS
    clients = [
        threading.Thread(target=client_loop, args=(service_stack, i, lambda: time.monotonic() < stop_at, ledger, 0.02))
        for i in range(3)
    ]
    for client in clients:
        client.start()
    for client in clients:
        client.join(LOAD_SECONDS + 120)
        assert not client.is_alive()
    wait_until(
        lambda: count(service_stack.database_url, OPEN_JOBS) == 0, timeout=120, interval=0.5, what="every job to end"
    )
    found = audit(service_stack.database_url, ledger)
    assert ledger.unexpected == []
    assert len(ledger.acknowledged) > 100 and ledger.retries > 0
    assert found.lost == [] and found.not_succeeded == []
    assert found.published_twice == 0 and found.results == found.succeeded
    for process in [api, *workers]:
        log = process.log_text()
        assert "injected fault: statement_not_sent" in log and "injected fault: commit_reply_lost" in log, process.name
