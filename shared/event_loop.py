"""The event loop a service process runs on.

uvloop's loop (libuv under asyncio's interface) by default: the API and the workers spend a large part of
their CPU in the event loop itself (its selector, callbacks, futures and transports: a fifth of the API's
samples in a work-down, docs/PERFORMANCE.md), and uvloop does that part in C. `JOBS_EVENT_LOOP=asyncio`
runs the standard library's loop instead, for a handler library that does not work under uvloop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import uvloop

from shared.env_settings import SettingsError

T = TypeVar("T")

EVENT_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}
EVENT_LOOP_DEFAULT = "uvloop"


def event_loop_factory(env: Mapping[str, str]) -> Callable[[], asyncio.AbstractEventLoop]:
    """JOBS_EVENT_LOOP's loop: `uvloop` (the default) or `asyncio`."""
    name = env.get("JOBS_EVENT_LOOP", "").strip() or EVENT_LOOP_DEFAULT
    if name not in EVENT_LOOPS:
        raise SettingsError(f"JOBS_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}, not {name!r}")
    return EVENT_LOOPS[name]


def run(main: Coroutine[Any, Any, T], env: Mapping[str, str]) -> T:
    """asyncio.run on the loop JOBS_EVENT_LOOP names."""
    with asyncio.Runner(loop_factory=event_loop_factory(env)) as runner:
        return runner.run(main)
