"""The handler API that job kinds are written against, the built-in kinds and the module loader."""

from shared.domain.checkpoints import Checkpoint
from shared.domain.kinds import Executor
from shared.handlers.api import (
    CheckpointRefused,
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    PushedBack,
    RetryableError,
    StopSignal,
)
from shared.handlers.declaration import JobKinds, decode_payload

__all__ = [
    "Checkpoint",
    "CheckpointRefused",
    "JobKinds",
    "decode_payload",
    "Executor",
    "HandlerError",
    "HandlerRegistry",
    "HandlerSpec",
    "JobContext",
    "OutcomeUnknownError",
    "PermanentError",
    "PushedBack",
    "RetryableError",
    "StopSignal",
]
