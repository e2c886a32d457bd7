"""Builds the registry: the built-in kinds plus every module named in JOBS_HANDLER_MODULES."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from shared.handlers.api import HandlerRegistry
from shared.handlers.builtin import register_builtin_kinds


def load_registry(module_paths: Iterable[str]) -> HandlerRegistry:
    """Each user module defines `register(registry: HandlerRegistry) -> None`."""
    registry = HandlerRegistry()
    register_builtin_kinds(registry)
    for path in module_paths:
        module = importlib.import_module(path)
        register = getattr(module, "register", None)
        if not callable(register):
            raise ValueError(f"handler module {path!r} has no register(registry) function")
        register(registry)
    return registry
