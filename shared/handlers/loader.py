"""Builds a worker's registry: the built-in kinds plus every module named in JOBS_HANDLER_MODULES."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from durable_jobs.declaration import JobKinds
from durable_jobs.handlers import HandlerRegistry
from shared.handlers.builtin import register_builtin_kinds


def load_registry(module_paths: Iterable[str]) -> HandlerRegistry:
    """Each user module defines `register(registry: HandlerRegistry) -> None`, or holds JobKinds at
    module level (docs/HANDLERS.md), or both."""
    registry = HandlerRegistry()
    register_builtin_kinds(registry)
    for path in module_paths:
        module = importlib.import_module(path)
        register = getattr(module, "register", None)
        declared = [value for value in vars(module).values() if isinstance(value, JobKinds)]
        if not callable(register) and not declared:
            raise ValueError(f"handler module {path!r} has no register(registry) function and no JobKinds")
        if callable(register):
            register(registry)
        for kinds in declared:
            kinds.register(registry)
    return registry
