"""The durable job service's SDK: the handler API job kinds are written against, and a client for callers.

Handlers:  `from durable_jobs import JobKinds, JobContext, RetryableError` (docs/HANDLERS.md); tests
           run them with `durable_jobs.testing.run_handler`.
Callers:   `durable_jobs.Client(target, token)` and `durable_jobs.AsyncClient`; failures raise
           `durable_jobs.errors.JobsError` subclasses.

The client and its gRPC stack are imported on first use, so a handler module (and a worker's child
process that imports one) loads no gRPC code for the names it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from durable_jobs.ids import FencingToken, JobId, TenantId
from durable_jobs.kinds import Executor
from durable_jobs.records import Checkpoint, ErrorCategory, Receipt

if TYPE_CHECKING:
    from durable_jobs.client import AsyncClient, Client
    from durable_jobs.jobs import Job, JobError, JobLogLine, JobState, Progress, Submission, Tls

__all__ = [
    "AsyncClient",
    "Checkpoint",
    "CheckpointRefused",
    "Client",
    "ErrorCategory",
    "Executor",
    "FencingToken",
    "HandlerError",
    "HandlerRegistry",
    "HandlerSpec",
    "Job",
    "JobContext",
    "JobError",
    "JobId",
    "JobKinds",
    "JobLogLine",
    "JobState",
    "OutcomeUnknownError",
    "PermanentError",
    "Progress",
    "PushedBack",
    "Receipt",
    "RetryableError",
    "SpawnRefused",
    "StopSignal",
    "Submission",
    "TenantId",
    "Tls",
    "decode_payload",
]

_LAZY = {
    "AsyncClient": "durable_jobs.client",
    "Client": "durable_jobs.client",
    "Job": "durable_jobs.jobs",
    "JobError": "durable_jobs.jobs",
    "JobLogLine": "durable_jobs.jobs",
    "JobState": "durable_jobs.jobs",
    "Progress": "durable_jobs.jobs",
    "Submission": "durable_jobs.jobs",
    "Tls": "durable_jobs.jobs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'durable_jobs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
