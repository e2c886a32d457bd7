"""The schema: numbered, forward-only migrations, and stored routines applied from files of their own.

Migrations (`migrations/NNNN_name.sql`) hold tables, indexes, grants and data moves; each is applied once,
in order, in its own transaction, and a landed one is never edited. Routines (`routines/concern.sql`) hold
the current text of the stored functions, `CREATE OR REPLACE`d whenever a file's checksum differs from the
one recorded when it was last applied (what Flyway calls repeatable migrations). Both run in one locked
run, interleaved: each routine file names the migration its text needs (`-- after: NNNN_name`) and is
applied as soon as the database has it, before any later migration. So a fresh database, one left at any
earlier version, and a later migration that grants on or calls a routine of a file all work: the routine
exists before the migration runs, and the tables it reads exist before the routine is created.

A routine file holds `CREATE OR REPLACE FUNCTION` statements only; grants on them, and the triggers that
call them, are a migration's. A routine that leaves its file is dropped by a migration, with `IF EXISTS`:
a database made after it left never had it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import psycopg

from shared.domain.errors import FailedPrecondition
from shared.storage import queries
from shared.storage.database import translate_db_errors

_FILENAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_ROUTINE_FILENAME = re.compile(r"^([a-z0-9_]+)\.sql$")
_AFTER_LINE = re.compile(r"^-- after: (\d{4})_([a-z0-9_]+)\s*$", re.MULTILINE)
_ROUTINE_NAME = re.compile(r"^CREATE OR REPLACE FUNCTION (\w+)\(", re.MULTILINE)
# Serialises concurrent `migrate` runs (several pods starting at once).
MIGRATION_LOCK_KEY = 7_310_001


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class RoutineFile:
    """One concern's routines; `after` is the version of the migration whose schema its text needs."""

    name: str
    after: int
    sql: str
    checksum: str
    routines: tuple[str, ...]


@dataclass(frozen=True)
class AppliedSchema:
    """What one run applied, in the order it applied it: migrations, and routine files whose text was new."""

    steps: list[Migration | RoutineFile] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.steps)

    @property
    def migrations(self) -> list[Migration]:
        return [step for step in self.steps if isinstance(step, Migration)]

    @property
    def routine_files(self) -> list[RoutineFile]:
        return [step for step in self.steps if isinstance(step, RoutineFile)]

    def labels(self) -> list[str]:
        return [
            f"{step.version:04d}_{step.name}" if isinstance(step, Migration) else f"routines/{step.name}.sql"
            for step in self.steps
        ]


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


def available_routine_files(migrations: Sequence[Migration] | None = None) -> list[RoutineFile]:
    """Every routines/*.sql file, checked: each names a migration that exists, and no routine is in two."""
    known = available_migrations() if migrations is None else migrations
    folder = resources.files("shared.storage").joinpath("routines")
    found = [
        parse_routine_file(match[1], entry.read_text(encoding="utf-8"), known)
        for entry in folder.iterdir()
        if (match := _ROUTINE_FILENAME.match(entry.name))
    ]
    found.sort(key=lambda r: r.name)
    owner: dict[str, str] = {}
    for routine_file in found:
        for routine in routine_file.routines:
            if routine in owner:
                raise RuntimeError(f"routine {routine} is in routines/{owner[routine]}.sql and {routine_file.name}.sql")
            owner[routine] = routine_file.name
    return found


def parse_routine_file(name: str, text: str, migrations: Sequence[Migration]) -> RoutineFile:
    """A routine file's text with the migration it follows, which must be one of `migrations`."""
    after = _AFTER_LINE.search(text)
    if after is None:
        raise RuntimeError(f"routines/{name}.sql must name the migration it needs: a line `-- after: NNNN_name`")
    if (int(after[1]), after[2]) not in {(m.version, m.name) for m in migrations}:
        raise RuntimeError(f"routines/{name}.sql is to follow {after[1]}_{after[2]}, which is no migration")
    return RoutineFile(
        name=name,
        after=int(after[1]),
        sql=text,
        checksum=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        routines=tuple(_ROUTINE_NAME.findall(text)),
    )


def migrate(
    database_url: str,
    *,
    migrations: Sequence[Migration] | None = None,
    routine_files: Sequence[RoutineFile] | None = None,
) -> AppliedSchema:
    """Applies what is missing and returns it; running it again applies nothing. Refuses a database whose
    encoding is not UTF-8 before changing anything. `migrations` and `routine_files` replace the packaged
    ones (for tests of the ordering)."""
    if migrations is None:
        migrations = available_migrations()
    if routine_files is None:
        routine_files = available_routine_files(migrations)
    with translate_db_errors(), psycopg.connect(database_url, autocommit=True) as conn:
        _require_utf8(conn)
        conn.execute(queries.MIGRATION_LOCK, {"lock_key": MIGRATION_LOCK_KEY})
        try:
            return _apply_missing(conn, migrations, routine_files)
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


def _apply_missing(
    conn: psycopg.Connection, migrations: Sequence[Migration], routine_files: Sequence[RoutineFile]
) -> AppliedSchema:
    conn.execute(queries.MIGRATION_TABLE_CREATE)
    conn.execute(queries.ROUTINE_TABLE_CREATE)
    done = {row[0] for row in conn.execute(queries.MIGRATION_APPLIED_VERSIONS)}
    recorded: dict[str, str] = dict(conn.execute(queries.ROUTINE_APPLIED_CHECKSUMS).fetchall())
    due = [r for r in routine_files if recorded.get(r.name) != r.checksum]
    applied = AppliedSchema()
    for migration in migrations:
        if migration.version in done:
            continue
        due = _apply_routines_ready(conn, due, _complete_through(done), applied)
        with conn.transaction():
            conn.execute(migration.sql)
            conn.execute(queries.MIGRATION_RECORD, {"version": migration.version, "name": migration.name})
        done.add(migration.version)
        applied.steps.append(migration)
    _apply_routines_ready(conn, due, _complete_through(done), applied)
    return applied


def _complete_through(done: set[int]) -> int:
    """The highest version up to which every migration has been applied."""
    version = 0
    while version + 1 in done:
        version += 1
    return version


def _apply_routines_ready(
    conn: psycopg.Connection, due: list[RoutineFile], schema_version: int, applied: AppliedSchema
) -> list[RoutineFile]:
    """Applies the due files whose migration the database has, in one transaction; returns the others.

    The routines are created twice. First without checking their bodies, as a restore does, so that they
    may call each other across files in any order; then again with the checks, so that a body naming
    what does not exist stops the run here instead of failing at its first call.
    """
    ready = [r for r in due if r.after <= schema_version]
    if not ready:
        return due
    with conn.transaction():
        conn.execute(queries.ROUTINE_BODY_CHECKS_OFF)
        for routine_file in ready:
            conn.execute(routine_file.sql)
        conn.execute(queries.ROUTINE_BODY_CHECKS_ON)
        for routine_file in ready:
            conn.execute(routine_file.sql)
            conn.execute(queries.ROUTINE_APPLIED_NAMES, {"routines": ",".join(routine_file.routines)})
            conn.execute(queries.ROUTINE_OWNER_HANDOVER)
            conn.execute(queries.ROUTINE_RECORD, {"file": routine_file.name, "checksum": routine_file.checksum})
    applied.steps.extend(ready)
    return [r for r in due if r.after > schema_version]
