"""Identifier types, so a tenant name is never passed where a job id belongs."""

import os
import time
import uuid

# The ids a handler sees are the SDK's, so that the service and handler code share one type.
from durable_jobs.ids import FencingToken, JobId, TenantId

__all__ = ["FencingToken", "JobId", "TenantId", "new_job_ids"]


_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0x2 << 62
_RANDOM_MASK = ((1 << 80) - 1) & ~(0xF << 76) & ~(0x3 << 62)


def new_job_ids(count: int) -> list[uuid.UUID]:
    """`count` fresh job ids, UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits. Ids
    made close in time sit close in every index keyed by job id, so inserts touch the same few pages
    however many finished jobs the tables hold; random v4 ids spread each batch over all of them."""
    stamp = (time.time_ns() // 1_000_000) << 80
    randomness = os.urandom(10 * count)
    return [
        uuid.UUID(int=stamp | _VERSION_7 | _VARIANT_RFC | int.from_bytes(randomness[i : i + 10], "big") & _RANDOM_MASK)
        for i in range(0, 10 * count, 10)
    ]
