"""An example handler package: two kinds declared at module level, one with a typed payload."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from shared.handlers import JobContext, JobKinds, PermanentError

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
