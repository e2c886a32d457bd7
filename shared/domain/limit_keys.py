"""Limit keys: the implicit ones every job carries, and the ones a submission adds for its own tenant.

A submission's key is `name` or `name@N`. `name` is scoped to the tenant (`tenant:<t>/<name>`), so one
tenant's keys never meet another's. `@N` is the submission's own bound: the job does not start while N or
more jobs carrying the key run, which lets a tenant hold a document to one job at a time (`doc:42@1`)
without an operator. An operator's limit on the scoped key applies as well.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.domain.errors import ViolationCollector

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
    return f"kind:{kind}"


def tenant_key(tenant: str) -> str:
    return f"tenant:{tenant}"


def scoped_key(tenant: str, name: str) -> str:
    return f"{tenant_key(tenant)}/{name}"


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
    return SubmissionKeys(tuple(scoped_key(tenant, name) for name in parsed.keys), parsed.bounds)
