"""Numbered, forward-only schema migrations, applied in order, each in its own transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

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
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            applied = []
            for migration in available_migrations():
                if migration.version in done:
                    continue
                with conn.transaction():
                    conn.execute(migration.sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                applied.append(migration)
            return applied
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
