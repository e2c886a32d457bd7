"""The limit-key grammar written once in SQL (shared/storage/routines/keys.sql) and once in Python
(shared/domain/limit_keys.py): the database writes and reads every key as Python does."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.limit_keys import KEY_NAME_MAX, key_tenant, kind_key, own_key, tenant_key, tenant_name_problem
from shared.domain.submission_rules import KIND_PATTERN

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
