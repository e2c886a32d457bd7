"""The handler API under its first import path (the SDK, `durable_jobs`, owns it; modules written against
`shared.handlers` keep working), the built-in kinds and the module loader."""

from durable_jobs.declaration import JobKinds, decode_payload
from durable_jobs.handlers import (
    CheckpointRefused,
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    PushedBack,
    RetryableError,
    SpawnRefused,
    StopSignal,
)
from durable_jobs.kinds import Executor
from durable_jobs.records import Checkpoint

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
    "SpawnRefused",
    "StopSignal",
]
