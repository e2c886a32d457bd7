"""Numbered, forward-only schema migrations, applied in order, each in its own transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

from shared.domain.errors import FailedPrecondition
from shared.storage import queries
from shared.storage.database import translate_db_errors

_FILENAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Serialises concurrent `migrate` runs (several pods starting at once).
MIGRATION_LOCK_KEY = 7_310_001


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    folder = resources.files("shared.storage").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILENAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def migrate(database_url: str) -> list[Migration]:
    """Applies what is missing and returns it; running it again applies nothing. Refuses a database
    whose encoding is not UTF-8 before changing anything."""
    with translate_db_errors(), psycopg.connect(database_url, autocommit=True) as conn:
        _require_utf8(conn)
        conn.execute(queries.MIGRATION_LOCK, {"lock_key": MIGRATION_LOCK_KEY})
        try:
            conn.execute(queries.MIGRATION_TABLE_CREATE)
            done = {row[0] for row in conn.execute(queries.MIGRATION_APPLIED_VERSIONS)}
            applied = []
            for migration in available_migrations():
                if migration.version in done:
                    continue
                with conn.transaction():
                    conn.execute(migration.sql)
                    conn.execute(queries.MIGRATION_RECORD, {"version": migration.version, "name": migration.name})
                applied.append(migration)
            return applied
        finally:
            conn.execute(queries.MIGRATION_UNLOCK, {"lock_key": MIGRATION_LOCK_KEY})


def _require_utf8(conn: psycopg.Connection[Any]) -> None:
    """Job payloads' text, labels, names and the migrations themselves are Unicode. initdb without a UTF-8
    locale (pg_autoctl's included) makes SQL_ASCII databases, which store bytes unchecked and cannot even
    take the migrations' text."""
    encoding = conn.info.parameter_status("server_encoding")
    if encoding != "UTF8":
        raise FailedPrecondition(
            f"the database's encoding is {encoding}, and the service needs UTF-8: create the database with"
            " ENCODING 'UTF8' (initdb --encoding=UTF8, or CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)",
            reason="DATABASE_NOT_UTF8",
        )
