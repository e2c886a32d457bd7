"""The handler API that job kinds are written against, the built-in kinds and the module loader."""

from shared.handlers.api import (
    Executor,
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    RetryableError,
    StopSignal,
)

__all__ = [
    "Executor",
    "HandlerError",
    "HandlerRegistry",
    "HandlerSpec",
    "JobContext",
    "OutcomeUnknownError",
    "PermanentError",
    "RetryableError",
    "StopSignal",
]
