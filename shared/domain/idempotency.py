"""The digest that decides whether a replayed idempotency key carries the same request."""

from __future__ import annotations

import hashlib
import json

from shared.domain.jobs import NewJob


def request_digest(job: NewJob) -> bytes:
    """SHA-256 over a canonical form of every field the caller chose."""
    canonical: dict[str, object] = {
        "kind": job.kind,
        "payload_sha256": hashlib.sha256(job.payload).hexdigest(),
        "priority": job.priority,
        "run_after": job.run_after.isoformat() if job.run_after else None,
        "max_attempts": job.max_attempts,
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "resource_key": job.resource_key,
        "resource_version": job.resource_version,
        "depends_on": list(job.depends_on),
        "labels": sorted(job.labels.items()),
        "dedupe_by_input": job.dedupe_by_input,
    }
    if job.limit_keys:  # only when given, so digests stored before limit keys existed still match
        canonical["limit_keys"] = list(job.limit_keys)
    if job.sequence_key is not None:  # likewise
        canonical["sequence_key"] = job.sequence_key
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).digest()


def input_digest(job: NewJob) -> bytes:
    """What de-duplication by input compares besides tenant, kind and resource version: the payload."""
    return hashlib.sha256(job.payload).digest()
