"""The limit-key grammar in Python (shared/domain/limit_keys.py): one-to-one, so that no tenant's key is
another tenant's or a kind's; and the names it cannot carry refused where they enter: tenant names when the
API reads its principals, declared keys when a worker registers a kind. (The database's grammar is held to
this one in tests/integration/test_limit_key_grammar.py.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api_service.principals import PrincipalDirectory
from shared.domain.limit_keys import (
    KEY_NAME_MAX,
    kind_key,
    own_key,
    scope_submission_keys,
    tenant_key,
    tenant_name_problem,
)
from shared.domain.submission_rules import KIND_PATTERN
from shared.env_settings import SettingsError
from shared.handlers.api import HandlerRegistry

pytestmark = pytest.mark.timeout(60)

TENANTS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(
    lambda t: tenant_name_problem(t) is None
)
KINDS = st.from_regex(KIND_PATTERN, fullmatch=True).filter(lambda k: len(k) <= 128)
NAMES = st.from_regex(rf"[A-Za-z0-9_.:=-]{{1,{KEY_NAME_MAX}}}", fullmatch=True)


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


@pytest.mark.parametrize("key", ["tenant:acme", "tenant:acme/eu", "kind:echo", ""])
def test_a_kind_cannot_declare_a_key_of_a_tenant_or_a_kind(key):
    registry = HandlerRegistry()

    with pytest.raises(ValueError, match="limit key"):
        registry.register("probe", limit_keys=[key])(lambda ctx: b"")
