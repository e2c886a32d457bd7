"""Child jobs: what `ctx.spawn` records, and the bounds the worker and the API both apply.

A spawned job is created only with its parent's accepted completion, in the transaction that stores the
parent's result: an attempt that fails, or whose lease was lost, creates none of its children, and the
one accepted completion creates them once.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from durable_jobs.ids import JobId
from durable_jobs.payloads import encode_payload

# The most jobs one parent may spawn: one completion carries them all.
CHILDREN_PER_PARENT_MAX = 1000
# The most bytes of one parent's children together (payloads, labels, keys, dependencies): with a result
# of the largest default size (2 MiB) the completion stays under the API's 4 MiB message limit.
CHILDREN_BYTES_MAX = 1024 * 1024
# What a spawned job cannot ask for: its id, made at spawn, already names it once; a resource version or
# de-duplication would let it be something other than a new job.
REFUSED_CHILD_FIELDS = frozenset({"idempotency_key", "resource_key", "resource_version", "dedupe_by_input"})
# What a child's size counts beside its payload, labels, keys and dependencies: its id, kind and numbers.
_CHILD_OVERHEAD_BYTES = 64

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


def child_bytes(
    kind: str, payload: bytes, labels: Mapping[str, str], depends_on: Sequence[str], limit_keys: Sequence[str]
) -> int:
    """What one child counts against CHILDREN_BYTES_MAX (the worker and the API count alike)."""
    return (
        _CHILD_OVERHEAD_BYTES
        + len(kind)
        + len(payload)
        + sum(len(k) + len(v) for k, v in labels.items())
        + sum(len(d) for d in depends_on)
        + sum(len(k) for k in limit_keys)
    )


@dataclass(frozen=True)
class SpawnedJob:
    """One job a handler spawned, its fields resolved at spawn (the payload as bytes, times absolute)."""

    job_id: JobId
    kind: str
    payload: bytes
    priority: int = 0
    run_after: datetime | None = None
    max_attempts: int = 0
    deadline: datetime | None = None
    depends_on: tuple[JobId, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    limit_keys: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return child_bytes(self.kind, self.payload, self.labels, self.depends_on, self.limit_keys)


def spawned_job(job_id: JobId, kind: str, payload: object, fields: Mapping[str, object]) -> SpawnedJob:
    """The spawn's fields checked and resolved; a refused field raises ValueError naming it, an unknown
    one TypeError, as a call with a wrong keyword would."""
    refused = sorted(REFUSED_CHILD_FIELDS.intersection(fields))
    if refused:
        raise ValueError(f"a spawned job cannot have {', '.join(refused)}: its job id already names it once")
    unknown = sorted(set(fields) - _SPAWN_FIELDS)
    if unknown:
        raise TypeError(f"spawn() got unexpected keyword arguments: {', '.join(unknown)}")
    if not isinstance(kind, str) or not kind:
        raise ValueError("spawn() needs a job kind")
    now = datetime.now().astimezone()
    return SpawnedJob(
        job_id=job_id,
        kind=kind,
        payload=encode_payload(payload),
        priority=_integer(fields, "priority"),
        run_after=_absolute(fields.get("run_after"), now, "run_after"),
        max_attempts=_integer(fields, "max_attempts"),
        deadline=_absolute(fields.get("deadline"), now, "deadline"),
        depends_on=tuple(JobId(str(d)) for d in _strings(fields, "depends_on")),
        labels={str(k): str(v) for k, v in dict(fields.get("labels") or {}).items()},  # type: ignore[call-overload]
        limit_keys=tuple(str(k) for k in _strings(fields, "limit_keys")),
    )


_SPAWN_FIELDS = frozenset({"priority", "run_after", "max_attempts", "deadline", "depends_on", "labels", "limit_keys"})


def _integer(fields: Mapping[str, object], name: str) -> int:
    value = fields.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"spawn(): {name} must be an int")
    return value


def _strings(fields: Mapping[str, object], name: str) -> list[object]:
    value = fields.get(name) or ()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        raise TypeError(f"spawn(): {name} must be a sequence of strings")
    return list(value)


def _absolute(value: object, now: datetime, name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return now + value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"spawn(): {name} needs an aware datetime (or a timedelta from now)")
        return value
    raise TypeError(f"spawn(): {name} must be a datetime or a timedelta")
