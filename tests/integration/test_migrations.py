"""The migrations and routine files: idempotent, serialised between concurrent runs, ordered so that each
finds what it needs, producing the committed schema, and never editing a landed migration.

The schema snapshot (tests/schema_snapshot.sql) is `pg_dump --schema-only --no-owner` of a freshly
migrated database, normalised. After adding a migration or changing a routine, refresh it and review
the diff:

    JOBS_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/integration/test_migrations.py -k snapshot

Every migration's checksum is recorded in tests/landed_migrations.sha256 (add a new one's line with
`cd shared/storage/migrations && sha256sum NNNN_name.sql`); once it has landed on the main branch, the
test below holds it to that checksum for ever.

`JOBS_TEST_PG_DUMP` names the pg_dump binary when the one on PATH does not match the server's version.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from shared.storage import queries
from shared.storage.migrator import (
    MIGRATION_LOCK_KEY,
    Migration,
    available_migrations,
    available_routine_files,
    migrate,
    parse_routine_file,
)
from tests.conditions import wait_until
from tests.database_roles import ServiceLogins
from tests.db_fixtures import _HOST_TAG

pytestmark = pytest.mark.timeout(30)

TESTS_DIR = Path(__file__).resolve().parents[1]
SNAPSHOT_PATH = TESTS_DIR / "schema_snapshot.sql"
LANDED_CHECKSUMS_PATH = TESTS_DIR / "landed_migrations.sha256"
MIGRATIONS_FOLDER = TESTS_DIR.parent / "shared" / "storage" / "migrations"
UPDATE_SNAPSHOT_ENV = "JOBS_UPDATE_SCHEMA_SNAPSHOT"
PG_DUMP_ENV = "JOBS_TEST_PG_DUMP"
SNAPSHOT_HEADER = (
    "-- The migrated schema, normalised. Written by tests/integration/test_migrations.py; refresh it with\n"
    f"-- {UPDATE_SNAPSHOT_ENV}=1 .venv/bin/pytest tests/integration/test_migrations.py -k snapshot\n"
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


def test_migrating_twice_applies_nothing_the_second_time(empty_database_url):
    first = migrate(empty_database_url)
    second = migrate(empty_database_url)

    assert [m.version for m in first.migrations] == [m.version for m in available_migrations()]
    assert sorted(r.name for r in first.routine_files) == [r.name for r in available_routine_files()]
    assert not second
    with psycopg.connect(empty_database_url) as conn:
        recorded = [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        routine_files: dict[str, str] = dict(conn.execute("SELECT file, checksum FROM schema_routines").fetchall())
    assert recorded == [m.version for m in first.migrations]
    assert routine_files == {r.name: r.checksum for r in first.routine_files}


def test_a_database_from_the_template_is_fully_migrated(database_url):
    assert not migrate(database_url)


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

    assert sorted(len(run.migrations) for run in applied) == [0] * (CONCURRENT_MIGRATORS - 1) + [
        len(available_migrations())
    ]
    assert sorted(len(run.routine_files) for run in applied) == [0] * (CONCURRENT_MIGRATORS - 1) + [
        len(available_routine_files())
    ]


def _advisory_waiters(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    ).fetchone()[0]


def _dump(database_url: str) -> str:
    pg_dump = _pg_dump_matching_server(database_url)
    dump = subprocess.run(
        [pg_dump, "--schema-only", "--no-owner", "--dbname", database_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return normalise_dump(dump)


def _snapshot() -> str:
    return normalise_dump(SNAPSHOT_PATH.read_text(encoding="utf-8"))


def test_the_migrated_schema_equals_the_snapshot(database_url):
    migrated = _dump(database_url)

    if os.environ.get(UPDATE_SNAPSHOT_ENV) == "1":
        SNAPSHOT_PATH.write_text(SNAPSHOT_HEADER + "\n" + migrated, encoding="utf-8")
        return
    assert SNAPSHOT_PATH.exists(), f"no snapshot yet: run with {UPDATE_SNAPSHOT_ENV}=1"
    assert migrated == _snapshot(), (
        f"the schema differs from {SNAPSHOT_PATH.name}; refresh with {UPDATE_SNAPSHOT_ENV}=1"
    )


def _landed_checksums() -> dict[str, str]:
    lines = LANDED_CHECKSUMS_PATH.read_text(encoding="utf-8").splitlines()
    return {name: checksum for checksum, name in (line.split() for line in lines if line.strip())}


def test_no_landed_migration_is_ever_edited():
    landed = _landed_checksums()
    present = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in MIGRATIONS_FOLDER.glob("*.sql")}

    assert sorted(landed.keys() - present.keys()) == [], "a landed migration was removed or renamed"
    edited = sorted(name for name, checksum in landed.items() if present[name] != checksum)
    assert edited == [], "landed migrations are forward-only: change the schema with a new migration instead"
    unrecorded = sorted(present.keys() - landed.keys())
    assert unrecorded == [], f"record each new migration's checksum in {LANDED_CHECKSUMS_PATH.name} (see above)"


# The last version the migrator applied without routine files: later migrations may create triggers on,
# or grant on, routines of the files.
_BEFORE_ROUTINE_FILES = 33


def _apply_as_before_routine_files(database_url: str, through_version: int) -> None:
    """A database as the migrator left it at `through_version`: without routine files up to the version
    that brought them, with the files that version's schema can carry after it; either way with no
    routine file recorded, as if each had changed since."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(queries.MIGRATION_TABLE_CREATE)
        for migration in available_migrations()[: min(through_version, _BEFORE_ROUTINE_FILES)]:
            with conn.transaction():
                conn.execute(migration.sql)
                conn.execute(queries.MIGRATION_RECORD, {"version": migration.version, "name": migration.name})
        if through_version > _BEFORE_ROUTINE_FILES:
            carried = [r for r in available_routine_files() if r.after <= through_version]
            migrate(database_url, migrations=available_migrations()[:through_version], routine_files=carried)
            conn.execute("DELETE FROM schema_routines")


@pytest.mark.parametrize("landed_version", range(1, len(_landed_checksums()) + 1))
def test_a_database_at_any_landed_version_migrates_to_the_snapshot(empty_database_url, landed_version):
    _apply_as_before_routine_files(empty_database_url, landed_version)

    applied = migrate(empty_database_url)

    assert [m.version for m in applied.migrations] == list(range(landed_version + 1, len(available_migrations()) + 1))
    assert sorted(r.name for r in applied.routine_files) == [r.name for r in available_routine_files()]
    assert _dump(empty_database_url) == _snapshot()


def _routine_text(conn: psycopg.Connection, name: str) -> str:
    return conn.execute("SELECT pg_get_functiondef(%s::regproc)", (name,)).fetchone()[0]


def test_a_routine_file_is_applied_again_only_when_its_checksum_changes(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        packaged = _routine_text(conn, "jobs_tenant_visible")
        conn.execute(
            "CREATE OR REPLACE FUNCTION jobs_tenant_visible(row_tenant text) RETURNS boolean"
            " LANGUAGE sql STABLE AS $$ SELECT true $$"
        )
        assert not migrate(database_url), "the recorded checksum is the file's: nothing to apply"

        conn.execute("UPDATE schema_routines SET checksum = 'of an older text' WHERE file = 'tenancy'")
        applied = migrate(database_url)

        assert [r.name for r in applied.routine_files] == ["tenancy"]
        assert _routine_text(conn, "jobs_tenant_visible") == packaged


def test_an_operators_retention_floor_outlives_every_routine_file(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION jobs_retention_floor() RETURNS interval"
            " LANGUAGE sql IMMUTABLE AS $$ SELECT interval '6 hours' $$"
        )
        conn.execute("DELETE FROM schema_routines")

        assert len(migrate(database_url).routine_files) == len(available_routine_files())
        assert conn.execute("SELECT jobs_retention_floor()").fetchone()[0].total_seconds() == 6 * 3600


# A later migration that grants on a routine of a file (so the file must come first), and a routine file
# that reads a table of that migration (so the migration must come first).
_PROBE_ROUTINE_FIRST = """-- A routine a later migration grants on.
-- after: {after}
CREATE OR REPLACE FUNCTION jobs_probe_answer() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 42 $$;
"""
_PROBE_MIGRATION = """CREATE TABLE probe_rows (n integer NOT NULL DEFAULT jobs_probe_answer());
GRANT EXECUTE ON FUNCTION jobs_probe_answer() TO jobs_worker;
"""
_PROBE_ROUTINE_AFTER = """-- A routine that reads the later migration's table.
-- after: {after}
CREATE OR REPLACE FUNCTION jobs_probe_count() RETURNS bigint
    LANGUAGE sql STABLE AS $$ SELECT count(*) FROM probe_rows $$;
"""


def _with_a_later_migration() -> tuple[list[Migration], list]:
    landed = available_migrations()
    later = Migration(len(landed) + 1, "probe_rows", _PROBE_MIGRATION)
    migrations = [*landed, later]
    before, after = f"{landed[-1].version:04d}_{landed[-1].name}", f"{later.version:04d}_{later.name}"
    routine_files = [
        *available_routine_files(migrations),
        parse_routine_file("probe_answer", _PROBE_ROUTINE_FIRST.format(after=before), migrations),
        parse_routine_file("probe_count", _PROBE_ROUTINE_AFTER.format(after=after), migrations),
    ]
    return migrations, routine_files


@pytest.mark.parametrize("start", ["fresh", "migrated"])
def test_routine_files_and_a_later_migration_each_find_what_they_need(start, request):
    url = request.getfixturevalue("empty_database_url" if start == "fresh" else "database_url")
    migrations, routine_files = _with_a_later_migration()

    labels = migrate(url, migrations=migrations, routine_files=routine_files).labels()

    probe_migration = f"{migrations[-1].version:04d}_probe_rows"  # one past the landed ones, whatever they are
    assert (
        labels.index("routines/probe_answer.sql")
        < labels.index(probe_migration)
        < labels.index("routines/probe_count.sql")
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO probe_rows DEFAULT VALUES")
        assert conn.execute("SELECT n, jobs_probe_count() FROM probe_rows").fetchone() == (42, 1)
    assert not migrate(url, migrations=migrations, routine_files=routine_files)


def test_a_routine_naming_what_does_not_exist_stops_the_run_and_records_nothing(database_url):
    migrations = available_migrations()
    last = f"{migrations[-1].version:04d}_{migrations[-1].name}"
    broken = parse_routine_file(
        "broken",
        f"-- A routine over a table no migration makes.\n-- after: {last}\n"
        "CREATE OR REPLACE FUNCTION jobs_probe_missing() RETURNS bigint LANGUAGE sql"
        " AS $$ SELECT count(*) FROM no_such_table $$;\n",
        migrations,
    )

    with pytest.raises(psycopg.errors.UndefinedTable):
        migrate(database_url, routine_files=[*available_routine_files(), broken])
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT to_regproc('jobs_probe_missing')").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM schema_routines WHERE file = 'broken'").fetchone()[0] == 0


def test_a_routine_file_must_name_a_migration_that_exists():
    migrations = available_migrations()
    body = "CREATE OR REPLACE FUNCTION jobs_probe() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n"

    with pytest.raises(RuntimeError, match="must name the migration"):
        parse_routine_file("probe", "-- A probe.\n" + body, migrations)
    with pytest.raises(RuntimeError, match="which is no migration"):
        parse_routine_file("probe", "-- A probe.\n-- after: 9999_never\n" + body, migrations)


@pytest.fixture
def migrator_login_url(test_databases, empty_database_url) -> Iterator[str]:
    """An empty database owned by jobs_migrator, reached as a LOGIN member of it (no superuser), as the
    security notes tell a deployment to migrate. The session's template made the group role."""
    role = f"jobs_test_migrator_{_HOST_TAG}_{os.getpid()}"
    database = urlsplit(empty_database_url).path.lstrip("/")
    with psycopg.connect(test_databases.url("postgres"), autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT jobs_migrator TO {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO jobs_migrator").format(sql.Identifier(database)))
    yield ServiceLogins.url(empty_database_url, role)
    test_databases.drop(database)
    with psycopg.connect(test_databases.url("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_routine_a_member_of_jobs_migrator_creates_belongs_to_jobs_migrator(migrator_login_url):
    migrations = available_migrations()
    last = f"{migrations[-1].version:04d}_{migrations[-1].name}"
    probe = parse_routine_file(
        "probe",
        f"-- A routine no migration made.\n-- after: {last}\n"
        "CREATE OR REPLACE FUNCTION jobs_probe() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n",
        migrations,
    )

    migrate(migrator_login_url, routine_files=[*available_routine_files(), probe])

    with psycopg.connect(migrator_login_url) as conn:
        owners: dict[str, str] = dict(
            conn.execute(
                "SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc AS p"
                " WHERE p.pronamespace = 'public'::regnamespace"
            ).fetchall()
        )
    assert set(owners.values()) == {"jobs_migrator"}
    assert owners["jobs_probe"] == "jobs_migrator"
