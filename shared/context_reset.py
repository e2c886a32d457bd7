"""Undoing a context variable's setting from code that may run in another context."""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import TypeVar

T = TypeVar("T")


def reset_where_set(var: ContextVar[T], token: Token[T]) -> None:
    """`var.reset(token)`, or nothing when the token belongs to another context: an async generator
    abandoned mid-stream (a watcher that went away) is closed by a task of the event loop's, whose
    context never saw the setting, so there is nothing there to undo (and `reset` would raise)."""
    try:
        var.reset(token)
    except ValueError:
        if token.var is not var:
            raise
