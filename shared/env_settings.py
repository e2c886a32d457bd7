"""Reading typed values from the environment, with errors that name the variable."""

from __future__ import annotations

import logging
from collections.abc import Mapping

LOG_LEVEL_DEFAULT = "INFO"


class SettingsError(ValueError):
    """A setting is missing or malformed; the process should exit with this message."""


def env_str(env: Mapping[str, str], name: str, default: str | None = None) -> str:
    value = env.get(name, "").strip()
    if value:
        return value
    if default is None:
        raise SettingsError(f"{name} must be set")
    return default


def env_optional(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, got {value}")
    return value


def env_log_level(env: Mapping[str, str], name: str = "JOBS_LOG_LEVEL") -> str:
    """A logging level name (DEBUG, INFO, WARNING, ERROR, CRITICAL), any case; INFO when unset."""
    level = env_str(env, name, LOG_LEVEL_DEFAULT).upper()
    if not isinstance(logging.getLevelNamesMapping().get(level), int):
        raise SettingsError(f"{name} must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {level!r}")
    return level


def env_list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated values, blanks dropped."""
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


def split_host_port(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts in brackets) for a listening socket; an empty host means all interfaces."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)
