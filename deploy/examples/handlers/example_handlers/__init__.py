"""An example handler package: kinds declared at module level, one with a typed payload, and a
multi-stage document pipeline that resumes from its checkpoints (documents.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from durable_jobs import JobContext, JobKinds, PermanentError

kinds = JobKinds()


@dataclass
class Thumbnail:
    url: str
    width: int


@kinds.kind("example.thumbnail", max_attempts=5, payload=Thumbnail, limit_keys=("provider:images",))
async def thumbnail(ctx: JobContext, request: Thumbnail) -> bytes:
    if request.width <= 0:
        raise PermanentError("width: must be positive")
    return f"{request.url}@{request.width}".encode()


@kinds.kind("example.digest", executor="process")
def digest(ctx: JobContext) -> bytes:
    """CPU-bound: runs in a child process, so it never delays heartbeats or other jobs."""
    value = ctx.payload
    for _ in range(10_000):
        if ctx.stop_requested.is_set():
            break
        value = hashlib.sha256(value).digest()
    return value.hex().encode()


# A module of its own, loaded with this package: JOBS_HANDLER_MODULES=example_handlers finds its kinds here.
from example_handlers.documents import kinds as document_kinds  # noqa: E402, F401 - found by the loader
