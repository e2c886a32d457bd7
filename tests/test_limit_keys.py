"""The limit-key grammar: written once in Python (shared/domain/limit_keys.py) and once in SQL
(shared/storage/routines/keys.sql), the two held to each other; injective, so that no tenant's key is
another tenant's or a kind's; and the names it cannot carry refused where they enter: tenant names when
the API reads its principals, declared keys when a worker registers a kind."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api_service.principals import PrincipalDirectory
from shared.domain.limit_keys import (
    KEY_NAME_MAX,
    key_tenant,
    kind_key,
    own_key,
    scope_submission_keys,
    tenant_key,
    tenant_name_problem,
)
from shared.domain.submission_rules import KIND_PATTERN
from shared.env_settings import SettingsError
from shared.handlers.api import HandlerRegistry
from tests.process_fixtures import REPO_ROOT

pytestmark = pytest.mark.timeout(120)

TENANTS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(
    lambda t: tenant_name_problem(t) is None
)
KINDS = st.from_regex(KIND_PATTERN, fullmatch=True).filter(lambda k: len(k) <= 128)
NAMES = st.from_regex(rf"[A-Za-z0-9_.:=-]{{1,{KEY_NAME_MAX}}}", fullmatch=True)
# One statement for a whole example: each row's keys as the database writes and reads them.
_SQL_KEYS = (
    "SELECT jobs_kind_key(x.kind), jobs_tenant_key(x.tenant), jobs_own_key(x.tenant, x.name),"
    " jobs_key_tenant(jobs_own_key(x.tenant, x.name)), jobs_key_tenant(jobs_tenant_key(x.tenant)),"
    " jobs_key_tenant(jobs_kind_key(x.kind))"
    " FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS x(tenant, kind, name, ord) ORDER BY x.ord"
)


@pytest.fixture
def keys_conn(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(TENANTS, KINDS, NAMES), min_size=1, max_size=20))
def test_the_database_writes_and_reads_every_key_as_python_does(keys_conn, rows):
    tenants, kinds, names = (list(column) for column in zip(*rows, strict=True))

    in_sql = keys_conn.execute(_SQL_KEYS, (tenants, kinds, names)).fetchall()

    in_python = [
        (kind_key(k), tenant_key(t), own_key(t, n), key_tenant(own_key(t, n)), key_tenant(tenant_key(t)), None)
        for t, k, n in rows
    ]
    assert in_sql == in_python
    assert [r[4] for r in in_sql] == tenants


@given(TENANTS, NAMES, TENANTS, NAMES, KINDS)
def test_no_key_names_two_things(tenant, name, other_tenant, other_name, kind):
    keys = {
        ("tenant", tenant): tenant_key(tenant),
        ("tenant", other_tenant): tenant_key(other_tenant),
        ("own", tenant, name): own_key(tenant, name),
        ("own", other_tenant, other_name): own_key(other_tenant, other_name),
        ("kind", kind): kind_key(kind),
    }
    assert len(set(keys.values())) == len(keys)


def test_a_submission_key_of_one_tenant_cannot_be_another_tenants_implicit_key():
    (scoped,) = scope_submission_keys("acme", ["eu"]).keys

    assert scoped == tenant_key("acme/eu")  # the collision the grammar has to rule out...
    assert tenant_name_problem("acme/eu") is not None  # ...by refusing the tenant that would make it


def _principals_file(tmp_path: Path, tenant: str) -> Path:
    digest = hashlib.sha256(b"token").hexdigest()
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[principal]]\ntoken_sha256 = "{digest}"\ntenant = "{tenant}"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize("tenant", ["acme/eu", "line\\nbreak"])
def test_a_tenant_name_the_keys_cannot_carry_is_refused_when_the_principals_are_read(tmp_path, tenant):
    with pytest.raises(SettingsError, match=r"principal\[0\]: tenant .* cannot be served"):
        PrincipalDirectory.load(_principals_file(tmp_path, tenant))


def test_the_api_does_not_start_with_a_tenant_whose_keys_would_be_another_tenants(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "JOBS_TOKENS_FILE": str(_principals_file(tmp_path, "acme/eu")),
    }
    run = subprocess.run(
        [sys.executable, "-m", "api_service"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert run.returncode == 2, run.stderr
    assert "configuration error: principal[0]: tenant 'acme/eu' cannot be served" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("key", ["tenant:acme", "tenant:acme/eu", "kind:echo", ""])
def test_a_kind_cannot_declare_a_key_of_a_tenant_or_a_kind(key):
    registry = HandlerRegistry()

    with pytest.raises(ValueError, match="limit key"):
        registry.register("probe", limit_keys=[key])(lambda ctx: b"")
