"""Limit keys: the grammar of the keys every job carries and of the ones a submission adds for its tenant.

Every job carries `kind:<kind>` and `tenant:<tenant>`; a kind may declare keys of its own (a provider's
quota, `provider:openai`), never in those two namespaces. A submission's key is `name` or `name@N`, stored
as `tenant:<tenant>/<name>`, so one tenant's keys never meet another's: no tenant name holds a `/` (a
principal naming one is refused when the API starts) and no key name does, so a key names exactly one
kind, one tenant, or one name of one tenant. `@N` is the submission's own bound: the job does not start
while N or more jobs carrying the key run, which lets a tenant hold a document to one job at a time
(`doc:42@1`) without an operator. An operator's limit on the scoped key applies as well.

The database writes and reads keys with the same grammar in shared/storage/routines/keys.sql;
tests/test_limit_keys.py holds the two to each other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# The implicit keys' namespaces and the rule for a kind's declared keys are the SDK's, whose registry
# checks them when a kind is declared; the rest of the grammar builds on them here.
from durable_jobs.kinds import KIND_PREFIX, TENANT_PREFIX
from durable_jobs.kinds import declared_key_problem as declared_key_problem
from shared.domain.errors import ViolationCollector

# Between a tenant and the name of one of its own keys; in no tenant name and no key name.
OWN_KEY_SEPARATOR = "/"
TENANT_NAME_MAX = 200
SUBMISSION_KEYS_MAX = 8
KEY_NAME_MAX = 100
OWN_BOUND_MAX = 10_000
_KEY = re.compile(rf"^([A-Za-z0-9_.:=-]{{1,{KEY_NAME_MAX}}})(?:@([0-9]{{1,5}}))?$")


@dataclass(frozen=True)
class SubmissionKeys:
    """The keys of one submission with each one's own bound (0: none)."""

    keys: tuple[str, ...] = ()
    bounds: tuple[int, ...] = ()


@dataclass(frozen=True)
class WaitingReason:
    """Why a runnable job is not claimed: `kind_paused`, `key_held`, `limit_running` or `limit_rate`."""

    reason: str
    key: str


def kind_key(kind: str) -> str:
    """The key every job of `kind` carries."""
    return f"{KIND_PREFIX}{kind}"


def tenant_key(tenant: str) -> str:
    """The key every job of `tenant` carries."""
    return f"{TENANT_PREFIX}{tenant}"


def own_key(tenant: str, name: str) -> str:
    """A submission's own key `name`, scoped to its tenant."""
    return f"{tenant_key(tenant)}{OWN_KEY_SEPARATOR}{name}"


def key_tenant(key: str) -> str | None:
    """The tenant whose key `key` is (its implicit key or one of its own); None for a kind's or a declared key."""
    if not key.startswith(TENANT_PREFIX):
        return None
    return key.removeprefix(TENANT_PREFIX).split(OWN_KEY_SEPARATOR, 1)[0]


def tenant_name_problem(tenant: str) -> str | None:
    """Why `tenant` cannot name a tenant, or None: the grammar needs it non-empty, printable and free of `/`."""
    if not tenant or len(tenant) > TENANT_NAME_MAX:
        return f"a tenant name is 1 to {TENANT_NAME_MAX} characters"
    if OWN_KEY_SEPARATOR in tenant:
        return (
            f"a tenant name cannot hold {OWN_KEY_SEPARATOR!r}: it separates a tenant from the names of its own"
            f" limit keys, so tenant 'a/b' would be tenant 'a''s own key 'b'"
        )
    if not tenant.isprintable():
        return "a tenant name holds printable characters only"
    return None


def parse_submission_keys(
    raw: Sequence[str], violations: ViolationCollector, *, field: str = "limit_keys"
) -> SubmissionKeys:
    """The submission's key names (unscoped) with their own bounds; every bad entry is reported under `field`."""
    if len(raw) > SUBMISSION_KEYS_MAX:
        violations.add(field, f"at most {SUBMISSION_KEYS_MAX} keys")
        return SubmissionKeys()
    names: list[str] = []
    bounds: list[int] = []
    for index, entry in enumerate(raw):
        match = _KEY.match(entry)
        bound = int(match[2]) if match and match[2] is not None else 0
        if match is None or (match[2] is not None and not 1 <= bound <= OWN_BOUND_MAX):
            violations.add(
                f"{field}[{index}]",
                f"a key is 1-{KEY_NAME_MAX} of A-Z a-z 0-9 _ . : = -, optionally @N with N in 1..{OWN_BOUND_MAX}",
            )
            continue
        if match[1] in names:
            violations.add(f"{field}[{index}]", "the same key twice")
            continue
        names.append(match[1])
        bounds.append(bound)
    return SubmissionKeys(tuple(names), tuple(bounds))


def scope_submission_keys(tenant: str, raw: Sequence[str]) -> SubmissionKeys:
    """The keys as stored and counted: each name scoped to the submitting tenant. Raises on bad input."""
    violations = ViolationCollector()
    parsed = parse_submission_keys(raw, violations)
    violations.raise_if_any()
    return SubmissionKeys(tuple(own_key(tenant, name) for name in parsed.keys), parsed.bounds)
