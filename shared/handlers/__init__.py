"""The handler API that job kinds are written against, the built-in kinds and the module loader."""

from shared.handlers.api import (
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    RetryableError,
)

__all__ = [
    "HandlerError",
    "HandlerRegistry",
    "HandlerSpec",
    "JobContext",
    "OutcomeUnknownError",
    "PermanentError",
    "RetryableError",
]
