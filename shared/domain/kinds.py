"""A job kind's policy as workers publish it and the API applies it: declared in handler code, so it is
the SDK's (durable_jobs.kinds)."""

from durable_jobs.kinds import (
    BACKOFF_BASE_SECONDS_DEFAULT,
    BACKOFF_CAP_SECONDS_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    Executor,
    KindPolicy,
)

__all__ = [
    "BACKOFF_BASE_SECONDS_DEFAULT",
    "BACKOFF_CAP_SECONDS_DEFAULT",
    "MAX_ATTEMPTS_DEFAULT",
    "Executor",
    "KindPolicy",
]
