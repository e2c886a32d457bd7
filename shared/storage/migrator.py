"""Numbered, forward-only schema migrations, applied in order, each in its own transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

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
    """Applies what is missing and returns it; running it again applies nothing."""
    with translate_db_errors(), psycopg.connect(database_url, autocommit=True) as conn:
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
