"""Database fixtures: a template built once per session by the real migrations, a fresh clone per test.

The server is reached through an admin URL (`JOBS_TEST_ADMIN_URL`, a libpq URL of a role allowed to
create databases). Every database this session creates is named `jobs_test_<host>_<pid>_…`, so
parallel sessions on one server never collide, and databases that a killed session on this host left
behind are dropped by the next one (their pid no longer runs).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import queue
import re
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import migrate

ADMIN_URL_ENV = "JOBS_TEST_ADMIN_URL"
ADMIN_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE_NAME_PREFIX = "jobs_test"
# Another host's pids mean nothing here, so only this host's leftovers are ever reaped.
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_OWN_NAME = re.compile(rf"^{DATABASE_NAME_PREFIX}_{_HOST_TAG}_(\d+)_")
# Measured on PostgreSQL 15 with this schema: WAL_LOG (the default) clones, uses and drops a database in
# ~75 ms, FILE_COPY in ~140 ms; FILE_COPY's two checkpoints cost more than WAL-logging a tiny template.
# On a server with fsync off (the suite's own, tests/suite_server.py) a checkpoint writes nothing to disk,
# and FILE_COPY's clone and drop take 12 and 5 ms against WAL_LOG's 15-25 and 12-14, at half the CPU.
CLONE_STRATEGY = "WAL_LOG"
CLONE_STRATEGY_WITHOUT_FSYNC = "FILE_COPY"
# PostgreSQL 15 ends every DROP DATABASE with an immediate checkpoint: 0.1 s on a quiet server, 1.4 s on
# one that six other suites share (measured: 16 drops one after another, 22 s). A test's database is
# dropped off the tests' path by dropper threads, each on its own connection: drops that wait at the same
# time are served by one checkpoint (the same 16 drops on 16 connections took 2.6 s), so a backlog drains
# in a few checkpoints rather than one each. Each dropper holds a connection of the server's
# max_connections, which the other suites share too.
DROPPERS = 4
# After the last test, the tests' own connections are closed: this many droppers drain what is left,
# served by half as many checkpoints. Not more: the suites sharing the server ran it out of connections.
DROPPERS_AT_CLOSE = 8
# This many databases (about 9 MB each) may wait for a dropper before a test's teardown waits too, which
# bounds the disk they hold (2.4 GB). With 32, the teardowns of a busy run waited 750 s in all; with
# 96, two of them still reached their test's timeout while six other suites shared the server.
DROPS_WAITING_MAX = 256
POOL_MAX_SIZE_DEFAULT = 10
# Lets a test find the pool's backends in pg_stat_activity (to wait until one is blocked on a lock).
POOL_APPLICATION_NAME = "jobs-tests"
# The tables whose full contents `SyncProbe.snapshot` compares, each in a stable order.
SNAPSHOT_QUERIES = {
    "jobs": "SELECT * FROM jobs ORDER BY job_id",
    "job_results": "SELECT * FROM job_results ORDER BY job_id",
    "job_events": "SELECT * FROM job_events ORDER BY job_id, sequence",
}


def pid_is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TestDatabases:
    """Creates and drops this session's databases through autocommit admin connections: one for the
    tests, one for each thread that drops the databases they finished with."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, admin_url: str) -> None:
        if "://" not in admin_url:
            raise pytest.UsageError(f"{ADMIN_URL_ENV} must be a URL (postgresql://user@host:port/db)")
        self._admin_url = admin_url
        self._admin = psycopg.connect(admin_url, autocommit=True)
        self._prefix = f"{DATABASE_NAME_PREFIX}_{_HOST_TAG}_{os.getpid()}"
        self._numbers = itertools.count(1)
        self._created: list[str] = []
        self._created_lock = threading.Lock()
        self._to_drop: queue.Queue[str | None] = queue.Queue(DROPS_WAITING_MAX)
        # Opened here, so that a server that refuses them fails the session at once, not a thread.
        self._droppers: list[tuple[threading.Thread, psycopg.Connection]] = []
        self._add_droppers(DROPPERS)
        self.template = f"{self._prefix}_template"
        fsync = self._admin.execute("SHOW fsync").fetchone()
        self._clone_strategy = CLONE_STRATEGY_WITHOUT_FSYNC if fsync and fsync[0] == "off" else CLONE_STRATEGY

    def _add_droppers(self, count: int) -> None:
        for _ in range(count):
            admin = psycopg.connect(self._admin_url, autocommit=True)
            dropper = threading.Thread(
                target=self._drop_in_background,
                args=(admin,),
                name=f"test-database-dropper-{len(self._droppers)}",
                daemon=True,
            )
            dropper.start()
            self._droppers.append((dropper, admin))

    def url(self, name: str) -> str:
        return urlsplit(self._admin_url)._replace(path=f"/{name}").geturl()

    def drop_abandoned(self) -> None:
        """Hands the droppers the databases of earlier sessions that died before cleaning up. Dropped one
        by one in the first test's setup, the 150 a killed session left took longer than that test's
        timeout on a busy server, and every test of the session failed with it."""
        names = self._admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{DATABASE_NAME_PREFIX}\\_%",)
        ).fetchall()
        for (name,) in names:
            match = _OWN_NAME.match(name)
            if match and not pid_is_running(int(match[1])):
                self._to_drop.put(name)

    def build_template(self) -> None:
        self.create(self.template, template="template0")
        migrate(self.url(self.template))

    def create(self, name: str, *, template: str) -> str:
        self._admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY {}").format(
                sql.Identifier(name), sql.Identifier(template), sql.SQL(self._clone_strategy)
            )
        )
        with self._created_lock:
            self._created.append(name)
        return self.url(name)

    def create_clone(self) -> str:
        """A fresh, migrated database; its name is unique within the session."""
        return self.create(f"{self._prefix}_{next(self._numbers)}", template=self.template)

    def create_empty(self) -> str:
        """A database without the schema, for testing the migrations themselves."""
        return self.create(f"{self._prefix}_{next(self._numbers)}_empty", template="template0")

    def drop(self, name: str) -> None:
        self._drop_on(self._admin, name)

    def _drop_on(self, admin: psycopg.Connection, name: str) -> None:
        # FORCE ends connections a failed test left open, so teardown never hangs on them.
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        with self._created_lock:
            if name in self._created:
                self._created.remove(name)

    def drop_url(self, url: str) -> None:
        self.drop(urlsplit(url).path.lstrip("/"))

    def drop_url_later(self, url: str) -> None:
        """Hands the database to the droppers; `close()` waits until it is gone."""
        self._to_drop.put(urlsplit(url).path.lstrip("/"))

    def _drop_in_background(self, admin: psycopg.Connection) -> None:
        while (name := self._to_drop.get()) is not None:
            try:
                self._drop_on(admin, name)
            except psycopg.Error:
                pass  # still listed as created: close() drops it again, and a failure there is seen
            finally:
                self._to_drop.task_done()

    def close(self) -> None:
        if not self._to_drop.empty():
            # A server out of connections refuses some: the droppers already running drain the rest.
            with contextlib.suppress(psycopg.OperationalError):
                self._add_droppers(DROPPERS_AT_CLOSE - len(self._droppers))
        self._to_drop.join()
        for _ in self._droppers:
            self._to_drop.put(None)
        for dropper, admin in self._droppers:
            dropper.join()
            admin.close()
        for name in list(reversed(self._created)):
            self.drop(name)
        self._admin.close()


class SyncProbe:
    """A sync autocommit connection to the test's database: for arranging states SQL-side and asserting."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        self.conn = conn

    def execute(self, query: str, params: dict[str, Any] | tuple | None = None) -> int:
        """Runs a statement; returns the number of rows it touched."""
        return self.conn.execute(query, params).rowcount

    def rows(self, query: str, params: dict[str, Any] | tuple | None = None) -> list[dict[str, Any]]:
        return self.conn.execute(query, params).fetchall()

    def one(self, query: str, params: dict[str, Any] | tuple | None = None) -> dict[str, Any]:
        found = self.rows(query, params)
        assert len(found) == 1, f"expected one row, got {len(found)}"
        return found[0]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.one("SELECT * FROM jobs WHERE job_id = %s", (job_id,))

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of jobs, job_results and job_events, to prove that a refused call changed nothing."""
        return {table: self.rows(query) for table, query in SNAPSHOT_QUERIES.items()}


# Closed by pytest_sessionfinish, not by the fixture's teardown: that runs within the last test's
# timeout, and the dropper may still have a backlog to work through.
_SESSION_DATABASES: list[TestDatabases] = []


@pytest.fixture(scope="session")
def test_databases() -> TestDatabases:
    databases = TestDatabases(os.environ.get(ADMIN_URL_ENV, ADMIN_URL_DEFAULT))
    _SESSION_DATABASES.append(databases)
    databases.drop_abandoned()
    databases.build_template()
    return databases


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the last test: waits for the dropper, then drops what is left, the template last."""
    while _SESSION_DATABASES:
        _SESSION_DATABASES.pop().close()


@pytest.fixture
def database_url(test_databases: TestDatabases) -> Iterator[str]:
    """URL of a fresh database with every migration applied, dropped after the test."""
    url = test_databases.create_clone()
    try:
        yield url
    finally:
        test_databases.drop_url_later(url)


@pytest.fixture(scope="module")
def module_database_url(test_databases: TestDatabases) -> Iterator[str]:
    """URL of a fresh migrated database that every test of one module shares, dropped after its last
    test: for tests that each make and read their own rows (see `module_service_stack`)."""
    url = test_databases.create_clone()
    try:
        yield url
    finally:
        test_databases.drop_url_later(url)


@pytest.fixture
def empty_database_url(test_databases: TestDatabases) -> Iterator[str]:
    """URL of a fresh database without any schema, dropped after the test."""
    url = test_databases.create_empty()
    try:
        yield url
    finally:
        test_databases.drop_url_later(url)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """The storage layer's pool, opened on the test's database."""
    database = await Database.open(
        PoolSettings(database_url, min_size=1, max_size=POOL_MAX_SIZE_DEFAULT, application_name=POOL_APPLICATION_NAME),
        wait=True,
    )
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def sync_db(database_url: str) -> Iterator[SyncProbe]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield SyncProbe(conn)
