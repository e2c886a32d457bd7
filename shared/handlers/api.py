"""The handler API under its first import path: modules written against `shared.handlers.api` keep
working. It is the SDK's (`durable_jobs`, sdk/python), which owns it and ships without the service."""

from durable_jobs.handlers import (
    BACKOFF_CAP_SECONDS_MAX,
    CheckpointBook,
    CheckpointRefused,
    DependencyResults,
    Handler,
    HandlerError,
    HandlerRegistry,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    ProgressSink,
    PushedBack,
    ReceiptBook,
    RetryableError,
    SpawnRefused,
    StopSignal,
)

__all__ = [
    "BACKOFF_CAP_SECONDS_MAX",
    "CheckpointBook",
    "CheckpointRefused",
    "DependencyResults",
    "Handler",
    "HandlerError",
    "HandlerRegistry",
    "HandlerSpec",
    "JobContext",
    "OutcomeUnknownError",
    "PermanentError",
    "ProgressSink",
    "PushedBack",
    "ReceiptBook",
    "RetryableError",
    "SpawnRefused",
    "StopSignal",
]
