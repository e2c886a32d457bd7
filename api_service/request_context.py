"""The authenticated principal of the call being handled, set by the interceptor."""

from __future__ import annotations

from contextvars import ContextVar, Token

from api_service.principals import Principal
from shared.context_reset import reset_where_set

_current: ContextVar[Principal] = ContextVar("jobs_principal")


def set_principal(principal: Principal) -> Token[Principal]:
    return _current.set(principal)


def reset_principal(token: Token[Principal]) -> None:
    reset_where_set(_current, token)


def current_principal() -> Principal:
    """Raises LookupError outside an authenticated call, which is a wiring bug."""
    return _current.get()
