"""LOGIN roles for tests that must run as the services do in production: members of jobs_api or
jobs_worker (created by the migrations), neither superuser nor owner of any table. Row-level security
means nothing to a superuser or an owner, so a wall tested as one of those proves nothing.

Roles are cluster-wide and the server is shared with other sessions: each session names its own roles
after its host and pid, creates them once, and drops them at its end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from tests.db_fixtures import _HOST_TAG, TestDatabases


@dataclass(frozen=True)
class ServiceLogins:
    """Login role names; `url` turns a database URL into one that logs in as a given role."""

    api: str
    worker: str

    @staticmethod
    def url(database_url: str, role: str) -> str:
        parts = urlsplit(database_url)
        host = parts.netloc.rpartition("@")[2]
        return parts._replace(netloc=f"{role}@{host}").geturl()


def _ensure_login(admin: psycopg.Connection, role: str, group: str) -> None:
    exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if not exists:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role)))


@pytest.fixture(scope="session")
def service_logins(test_databases: TestDatabases) -> Iterator[ServiceLogins]:
    """An API login (member of jobs_api) and a worker login (member of jobs_worker) for this session.
    The template is migrated before this runs, so the groups exist."""
    suffix = f"{_HOST_TAG}_{os.getpid()}"
    logins = ServiceLogins(api=f"jobs_test_api_{suffix}", worker=f"jobs_test_worker_{suffix}")
    admin_url = test_databases.url("postgres")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        _ensure_login(admin, logins.api, "jobs_api")
        _ensure_login(admin, logins.worker, "jobs_worker")
    try:
        yield logins
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for role in (logins.api, logins.worker):
                # Connections of this session's databases are gone by now, except when a test leaked
                # one; a role left behind is harmless and the next session with this pid reuses it.
                with contextlib.suppress(psycopg.Error):
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
