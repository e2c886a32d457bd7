"""Who is calling: bearer tokens checked against the principals file, which stores only their hashes."""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from shared.domain.ids import TenantId
from shared.domain.limit_keys import tenant_name_problem
from shared.env_settings import SettingsError


class Role(StrEnum):
    TENANT = "tenant"
    WORKER = "worker"
    # An operator: AdminService only, across tenants, every change recorded with its name.
    ADMIN = "admin"
    # An operator's console or an auditor: AdminService's reads only.
    ADMIN_READONLY = "admin-readonly"


@dataclass(frozen=True)
class Principal:
    role: Role
    # Set for tenant callers only; every JobService call is scoped to it.
    tenant: TenantId | None
    # For the job history: "tenant:acme", "worker:<name>" or "admin:<name>".
    name: str


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    principal: Principal


class PrincipalDirectory:
    def __init__(self, entries: list[_Entry]) -> None:
        self._entries = entries

    @classmethod
    def load(cls, path: Path) -> PrincipalDirectory:
        """Parses the TOML file; a malformed entry stops the process rather than being skipped."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read principals file {str(path)!r}: {exc}") from None
        entries = [_parse_entry(i, raw) for i, raw in enumerate(data.get("principal", []))]
        return cls(entries)

    def tenants(self) -> list[TenantId]:
        """The tenants the file names, each once, in the file's order."""
        return list(dict.fromkeys(e.principal.tenant for e in self._entries if e.principal.tenant is not None))

    def authenticate(self, token: str) -> Principal | None:
        """Compares the token's hash with every entry in constant time, so timing reveals nothing."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found

    def by_digest(self, digest: bytes) -> Principal | None:
        """The principal whose token hashes to `digest`: a console session keeps only the digest, and
        asks again on every request, so a token removed from the file ends its sessions at the reload."""
        found = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found


class PrincipalsFile:
    """The principals file, re-read on request (SIGHUP). A call holds the Principal it authenticated
    with, so a reload never disturbs calls in flight; a file that no longer parses keeps the old
    directory in force."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._directory = PrincipalDirectory.load(path)

    def current(self) -> PrincipalDirectory:
        return self._directory

    def reload(self) -> None:
        """Raises SettingsError, leaving the directory unchanged, when the file is unreadable or malformed."""
        self._directory = PrincipalDirectory.load(self._path)


def _parse_entry(index: int, raw: dict[str, object]) -> _Entry:
    where = f"principal[{index}]"
    try:
        digest = bytes.fromhex(str(raw["token_sha256"]))
    except (KeyError, ValueError):
        raise SettingsError(f"{where}: token_sha256 must be the hex SHA-256 of a token") from None
    if len(digest) != 32:
        raise SettingsError(f"{where}: token_sha256 must be 64 hex characters")
    tenant, role = raw.get("tenant"), raw.get("role", "tenant")
    if role == Role.WORKER and not tenant:
        name = str(raw.get("name", "worker"))
        return _Entry(digest, Principal(Role.WORKER, None, f"worker:{name}"))
    if role == Role.TENANT and isinstance(tenant, str) and tenant:
        problem = tenant_name_problem(tenant)
        if problem is not None:
            raise SettingsError(f"{where}: tenant {tenant!r} cannot be served: {problem}")
        return _Entry(digest, Principal(Role.TENANT, TenantId(tenant), f"tenant:{tenant}"))
    if role in (Role.ADMIN, Role.ADMIN_READONLY) and not tenant:
        # The name is what job histories and admin_actions record as "who": one per person or console.
        name = str(raw.get("name", "operator"))
        return _Entry(digest, Principal(Role(str(role)), None, f"admin:{name}"))
    raise SettingsError(
        f'{where}: needs either tenant = "<name>" or role = "worker", "admin" or "admin-readonly" (without a tenant)'
    )
