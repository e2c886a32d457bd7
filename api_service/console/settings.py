"""The console's settings, part of the API's (read once in main())."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.env_settings import SettingsError, env_float, env_optional, split_host_port

SESSION_IDLE_SECONDS_DEFAULT = 3600.0
SESSION_MAX_SECONDS_DEFAULT = 12 * 3600.0


@dataclass(frozen=True)
class ConsoleSettings:
    listen: str
    # A session ends after this long without a request, and after the maximum whatever happens.
    session_idle_seconds: float = SESSION_IDLE_SECONDS_DEFAULT
    session_max_seconds: float = SESSION_MAX_SECONDS_DEFAULT

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConsoleSettings | None:
        """None (no console) unless JOBS_CONSOLE_LISTEN is set."""
        listen = env_optional(env, "JOBS_CONSOLE_LISTEN")
        if listen is None:
            return None
        try:
            split_host_port(listen)
        except ValueError:
            raise SettingsError(f"JOBS_CONSOLE_LISTEN {listen!r} is not host:port") from None
        return cls(
            listen=listen,
            session_idle_seconds=env_float(
                env, "JOBS_CONSOLE_SESSION_IDLE_SECONDS", SESSION_IDLE_SECONDS_DEFAULT, minimum=1.0
            ),
            session_max_seconds=env_float(
                env, "JOBS_CONSOLE_SESSION_MAX_SECONDS", SESSION_MAX_SECONDS_DEFAULT, minimum=1.0
            ),
        )
