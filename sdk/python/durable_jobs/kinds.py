"""A job kind's policy as workers publish it and the API applies it."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass

MAX_ATTEMPTS_DEFAULT = 3
# Retry backoff: full jitter in [0, min(cap, base * 2^(attempt-1))] seconds.
BACKOFF_BASE_SECONDS_DEFAULT = 1.0
BACKOFF_CAP_SECONDS_DEFAULT = 300.0
# The namespaces of the keys every job carries (`kind:<kind>`, `tenant:<tenant>`): a kind declares keys
# outside them. The service's whole key grammar (shared/domain/limit_keys.py) builds on these.
KIND_PREFIX = "kind:"
TENANT_PREFIX = "tenant:"


class Executor(enum.StrEnum):
    """Where a kind's handler runs in a worker replica."""

    ASYNC = "async"  # on the event loop: must await, never block
    THREAD = "thread"  # a plain `def`, in the replica's bounded thread pool
    PROCESS = "process"  # a plain `def` in a child process: CPU-bound code, terminated on stop


@dataclass(frozen=True)
class KindPolicy:
    kind: str
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    backoff_base_seconds: float = BACKOFF_BASE_SECONDS_DEFAULT
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS_DEFAULT
    # Longest one attempt may run; None means only the lease bounds it.
    timeout_seconds: float | None = None
    # True for kinds that call out to systems which may act on a request whose answer was lost.
    external_side_effects: bool = False
    # Limit keys every job of the kind carries besides `kind:<kind>` and `tenant:<tenant>`.
    limit_keys: tuple[str, ...] = ()
    executor: Executor = Executor.ASYNC

    def digest(self) -> bytes:
        """Equal for equal policies, whichever replica computed it: detects replicas that disagree."""
        fields = asdict(self)
        fields["limit_keys"] = sorted(self.limit_keys)
        fields["executor"] = self.executor.value
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).digest()


def declared_key_problem(key: str) -> str | None:
    """Why a kind cannot declare `key`, or None: the kind and tenant namespaces are the implicit keys'."""
    if not key or not key.isprintable():
        return "a declared limit key is a non-empty printable string"
    if key.startswith((KIND_PREFIX, TENANT_PREFIX)):
        return f"a declared limit key cannot start with {KIND_PREFIX!r} or {TENANT_PREFIX!r}: those are every job's own"
    return None
