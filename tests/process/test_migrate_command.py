"""`python -m api_service migrate`, the command the migration Job runs, as a process: what it tells an
operator when the database cannot take the schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

pytestmark = pytest.mark.timeout(90)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sql_ascii_database_url(empty_database_url: str) -> Iterator[str]:
    """A database of the kind initdb makes without a UTF-8 locale, on the test server."""
    base, name = empty_database_url.rsplit("/", 1)
    name = f"{name}_ascii"
    with psycopg.connect(empty_database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'").format(
                sql.Identifier(name)
            )
        )
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_migrate_refuses_a_database_that_is_not_utf8_in_one_line(sql_ascii_database_url: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "api_service", "migrate"],
        env={**os.environ, "DATABASE_URL": sql_ascii_database_url},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )

    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "SQL_ASCII" in lines[0] and "UTF-8" in lines[0]
    with psycopg.connect(sql_ascii_database_url) as conn:
        assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None
