"""Identifier types, so a tenant name is never passed where a job id belongs."""

import os
import time

# Job ids a worker makes for spawned jobs are made as the API makes them, so the SDK holds the maker.
from durable_jobs.children import new_job_ids

# The ids a handler sees are the SDK's, so that the service and handler code share one type.
from durable_jobs.ids import FencingToken, JobId, TenantId

__all__ = ["FencingToken", "JobId", "TenantId", "job_ids_from_block", "new_job_id_block", "new_job_ids"]

_ID_BYTES = 16
# new_job_ids' layout (UUIDv7): 48 bits of Unix milliseconds, the version (7), 12 random bits, the RFC
# variant (binary 10), 62 random bits. The mask keeps the random bits, the fixed part sets the others.
_RANDOM_BITS = bytes(6) + b"\x0f\xff\x3f" + b"\xff" * 7
_VERSION_AND_VARIANT = bytes(6) + b"\x70\x00\x80" + bytes(7)


def new_job_id_block(count: int) -> bytes:
    """`count` fresh job ids as new_job_ids makes them, as their 16 bytes each one after another: made with a
    few operations on the whole block rather than an object per id (a SubmitJobs of 500 makes 500)."""
    stamp = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    random_bits = int.from_bytes(os.urandom(_ID_BYTES * count), "big")
    mask = int.from_bytes(_RANDOM_BITS * count, "big")
    fixed = int.from_bytes(bytes(a | b for a, b in zip(stamp + bytes(10), _VERSION_AND_VARIANT, strict=True)) * count)
    return ((random_bits & mask) | fixed).to_bytes(_ID_BYTES * count, "big")


def job_ids_from_block(block: bytes) -> list[JobId]:
    """The ids of a new_job_id_block, as str(uuid.UUID) writes them."""
    count = len(block) // _ID_BYTES
    if not count:
        return []
    hexed = block.hex().encode()
    # Each id's 32 digits go to their places among its hyphens, a digit position at a time, and a comma
    # after each id to split them apart.
    written = bytearray(b"-" * (_WRITTEN_CHARS - 1) + b",") * count
    for digit, place in enumerate(_DIGIT_PLACES):
        written[place::_WRITTEN_CHARS] = hexed[digit :: 2 * _ID_BYTES]
    return written[:-1].decode().split(",")  # type: ignore[return-value]  # JobId is str


# Where each of an id's 32 hex digits goes in its 36 characters (8-4-4-4-12, hyphens between), and the
# characters an id takes with the comma after it.
_DIGIT_PLACES = [place for place in range(36) if place not in (8, 13, 18, 23)]
_WRITTEN_CHARS = 37
