"""The migrations: idempotent, serialised between concurrent runs, and producing the committed schema.

The schema snapshot (tests/schema_snapshot.sql) is `pg_dump --schema-only --no-owner` of a freshly
migrated database, normalised. After adding a migration, refresh it and review the diff:

    JOBS_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/test_migrations.py -k snapshot

`JOBS_TEST_PG_DUMP` names the pg_dump binary when the one on PATH does not match the server's version.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from shared.storage.migrator import MIGRATION_LOCK_KEY, available_migrations, migrate
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)

SNAPSHOT_PATH = Path(__file__).with_name("schema_snapshot.sql")
UPDATE_SNAPSHOT_ENV = "JOBS_UPDATE_SCHEMA_SNAPSHOT"
PG_DUMP_ENV = "JOBS_TEST_PG_DUMP"
SNAPSHOT_HEADER = (
    "-- The migrated schema, normalised. Written by tests/test_migrations.py; refresh it with\n"
    f"-- {UPDATE_SNAPSHOT_ENV}=1 .venv/bin/pytest tests/test_migrations.py -k snapshot\n"
)
CONCURRENT_MIGRATORS = 4
# Lines of a dump that vary between runs or servers without saying anything about the schema:
# pg_dump's comments and versions, session settings, and the random key of \restrict (15.14+).
_NOISE = re.compile(r"^(--.*|\\(un)?restrict .*|SET .*|SELECT pg_catalog\.set_config\(.*)$")


def normalise_dump(text: str) -> str:
    lines = [line.rstrip() for line in text.splitlines() if not _NOISE.match(line)]
    collapsed = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return collapsed + "\n"


def _pg_dump_matching_server(database_url: str) -> str:
    pg_dump = os.environ.get(PG_DUMP_ENV) or shutil.which("pg_dump")
    if not pg_dump:
        pytest.fail(f"pg_dump is not on PATH; install PostgreSQL's client tools or set {PG_DUMP_ENV}")
    client = subprocess.run([pg_dump, "--version"], capture_output=True, text=True, check=True).stdout
    client_major = re.search(r"\)\s*(\d+)", client)  # "pg_dump (PostgreSQL) 15.20 (Debian …)"
    with psycopg.connect(database_url) as conn:
        server_major = int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10_000
    if client_major is None or int(client_major[1]) != server_major:
        pytest.fail(f"the snapshot needs pg_dump {server_major}, found {client.strip()}; set {PG_DUMP_ENV}")
    return pg_dump


@pytest.fixture
def sql_ascii_database_url(empty_database_url: str) -> Iterator[str]:
    """A database of the kind initdb makes without a UTF-8 locale, on the test server."""
    url = empty_database_url.rsplit("/", 1)[0] + "/" + empty_database_url.rsplit("/", 1)[1] + "_ascii"
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(empty_database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'").format(
                sql.Identifier(name)
            )
        )
    try:
        yield url
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_migrate_refuses_a_database_that_is_not_utf8_in_one_line(sql_ascii_database_url):
    completed = subprocess.run(
        [sys.executable, "-m", "api_service", "migrate"],
        env={**os.environ, "DATABASE_URL": sql_ascii_database_url},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )

    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "SQL_ASCII" in lines[0] and "UTF-8" in lines[0]
    with psycopg.connect(sql_ascii_database_url) as conn:
        assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None


def test_migrating_twice_applies_nothing_the_second_time(empty_database_url):
    first = migrate(empty_database_url)
    second = migrate(empty_database_url)

    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert second == []
    with psycopg.connect(empty_database_url) as conn:
        recorded = [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert recorded == [m.version for m in first]


def test_a_database_from_the_template_is_fully_migrated(database_url):
    assert migrate(database_url) == []


async def test_concurrent_migrations_are_serialised(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        runs = asyncio.gather(*(asyncio.to_thread(migrate, empty_database_url) for _ in range(CONCURRENT_MIGRATORS)))

        await wait_until(
            lambda: _advisory_waiters(holder) == CONCURRENT_MIGRATORS,
            what="every migrator to wait for the migration lock",
        )
        assert holder.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None
        holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
        applied = await runs

    assert sorted(len(run) for run in applied) == [0] * (CONCURRENT_MIGRATORS - 1) + [len(available_migrations())]


def _advisory_waiters(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    ).fetchone()[0]


def test_the_migrated_schema_equals_the_snapshot(database_url):
    pg_dump = _pg_dump_matching_server(database_url)
    dump = subprocess.run(
        [pg_dump, "--schema-only", "--no-owner", "--dbname", database_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    migrated = normalise_dump(dump)

    if os.environ.get(UPDATE_SNAPSHOT_ENV) == "1":
        SNAPSHOT_PATH.write_text(SNAPSHOT_HEADER + "\n" + migrated, encoding="utf-8")
        return
    assert SNAPSHOT_PATH.exists(), f"no snapshot yet: run with {UPDATE_SNAPSHOT_ENV}=1"
    committed = normalise_dump(SNAPSHOT_PATH.read_text(encoding="utf-8"))
    assert migrated == committed, f"the schema differs from {SNAPSHOT_PATH.name}; refresh with {UPDATE_SNAPSHOT_ENV}=1"
