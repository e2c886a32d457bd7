"""Operator principals in the principals file: the roles parse with their names, and a malformed
operator entry stops the process rather than being skipped."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from api_service.principals import PrincipalDirectory, Role
from shared.env_settings import SettingsError


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_admin_and_readonly_principals_carry_their_names(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[principal]]\ntoken_sha256 = "{_digest("a")}"\nrole = "admin"\nname = "alice"\n'
        f'[[principal]]\ntoken_sha256 = "{_digest("c")}"\nrole = "admin-readonly"\n'
    )
    directory = PrincipalDirectory.load(path)
    alice, console = directory.authenticate("a"), directory.authenticate("c")
    assert alice is not None and (alice.role, alice.tenant, alice.name) == (Role.ADMIN, None, "admin:alice")
    assert console is not None and (console.role, console.name) == (Role.ADMIN_READONLY, "admin:operator")


@pytest.mark.parametrize(
    "entry",
    ['role = "admin"\ntenant = "acme"', 'role = "root"', 'role = "admin-readonly"\ntenant = "acme"'],
)
def test_an_operator_entry_with_a_tenant_or_an_unknown_role_is_refused(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[principal]]\ntoken_sha256 = "{_digest("x")}"\n{entry}\n')
    with pytest.raises(SettingsError, match="principal"):
        PrincipalDirectory.load(path)
