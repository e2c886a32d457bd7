"""A context variable's setting undone from a context that never saw it: an abandoned stream's close."""

from __future__ import annotations

import asyncio
import contextvars
import gc
from collections.abc import AsyncIterator

import pytest

from shared.context_reset import reset_where_set
from shared.storage.database import call_deadline, current_call_deadline

_var: contextvars.ContextVar[str] = contextvars.ContextVar("test_var", default="unset")


def test_a_reset_in_the_setting_context_restores_the_value() -> None:
    token = _var.set("set")
    reset_where_set(_var, token)
    assert _var.get() == "unset"


def test_a_reset_from_another_context_leaves_both_as_they_were() -> None:
    token = _var.set("set")
    other = contextvars.Context()
    other.run(reset_where_set, _var, token)
    assert _var.get() == "set"
    assert other.run(_var.get) == "unset"
    reset_where_set(_var, token)
    assert _var.get() == "unset"


def test_a_token_of_another_variable_is_still_refused() -> None:
    other_var: contextvars.ContextVar[str] = contextvars.ContextVar("other")
    token = other_var.set("x")
    with pytest.raises(ValueError):
        reset_where_set(_var, token)


def test_an_abandoned_stream_inside_a_call_deadline_closes_without_an_error() -> None:
    """As a WatchJob stream whose caller went away: the loop closes the generator in a task of its own."""
    errors: list[dict[str, object]] = []

    async def stream() -> AsyncIterator[int]:
        with call_deadline(30.0):
            while True:
                yield 1

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        iterator = stream()
        await anext(iterator)
        del iterator
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert errors == []
    assert current_call_deadline() is None
