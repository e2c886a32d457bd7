"""Where the services connect: the pooled URL for transactions, and a direct one for what needs a session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from shared.env_settings import SettingsError, env_float, env_optional, env_str
from shared.storage.fault_injection import FAULT_INJECTION_MAX

# psycopg's own default: a statement is prepared on a connection after it ran this many times there.
PREPARE_THRESHOLD_DEFAULT = 5


class Pooling(StrEnum):
    """What sits between DATABASE_URL and PostgreSQL."""

    # PostgreSQL itself, or a pooler in session mode: every connection is a session of its own.
    SESSION = "session"
    # A pooler in transaction mode (PgBouncer `pool_mode = transaction`): consecutive transactions of one
    # client connection may run on different server sessions, so nothing may outlive a transaction.
    TRANSACTION = "transaction"


@dataclass(frozen=True)
class DatabaseSettings:
    # Every transaction goes through this URL (a multi-host URL with target_session_attrs=read-write
    # follows a failover).
    url: str
    # What needs a session of its own connects here: LISTEN, the queue gauges' exporter lock, the
    # migrations' lock. None when `url` is transaction-pooled and no direct URL was given: then wake-ups
    # and WatchJob fall back to polling.
    session_url: str | None
    pooling: Pooling
    # JOBS_FAULT_INJECTION: the fraction of statements that fail on purpose, for chaos runs and tests; 0 is off.
    fault_injection: float = 0.0

    @property
    def prepare_threshold(self) -> int | None:
        """psycopg's server-side prepared statements live in one server session: a transaction pooler
        would hand them to another client, so they are off there (None), on by psycopg's default else."""
        return None if self.pooling is Pooling.TRANSACTION else PREPARE_THRESHOLD_DEFAULT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DatabaseSettings:
        url = env_str(env, "DATABASE_URL")
        raw_pooling = env_str(env, "JOBS_DB_POOLING", Pooling.SESSION.value).lower()
        try:
            pooling = Pooling(raw_pooling)
        except ValueError:
            choices = ", ".join(p.value for p in Pooling)
            raise SettingsError(f"JOBS_DB_POOLING must be one of {choices}, got {raw_pooling!r}") from None
        direct = env_optional(env, "DATABASE_DIRECT_URL")
        if direct is None and pooling is Pooling.SESSION:
            direct = url
        fault_injection = env_float(env, "JOBS_FAULT_INJECTION", 0.0)
        if fault_injection > FAULT_INJECTION_MAX:
            raise SettingsError(f"JOBS_FAULT_INJECTION must be at most {FAULT_INJECTION_MAX}, got {fault_injection}")
        return cls(url=url, session_url=direct, pooling=pooling, fault_injection=fault_injection)
