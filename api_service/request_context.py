"""The authenticated principal of the call being handled, set by the interceptor."""

from __future__ import annotations

from contextvars import ContextVar

from api_service.principals import Principal

_current: ContextVar[Principal] = ContextVar("jobs_principal")


def set_principal(principal: Principal):
    return _current.set(principal)


def reset_principal(token) -> None:
    _current.reset(token)


def current_principal() -> Principal:
    """Raises LookupError outside an authenticated call, which is a wiring bug."""
    return _current.get()
