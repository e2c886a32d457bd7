"""Transactional enqueue for services with their own PostgreSQL database.

Write the submission into the outbox table in the same transaction as your own changes; the relay
(`python -m jobs_outbox.relay`) submits it to the job service after commit, with an idempotency key
derived from the row, so a crash anywhere yields the job exactly once:

    with conn.transaction():
        conn.execute("UPDATE documents SET version = version + 1 WHERE id = %s", (doc_id,))
        jobs_outbox.enqueue(conn, kind="index-document", payload=doc_id.encode())

A deletion of a resource key travels the same way (`enqueue_deletion`), ordered with the versions of its
key, so that a version saved before the deletion never comes back after it.

This package depends on psycopg and the generated jobs.v1 stubs only, never on the service's code.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any
from uuid import UUID

import psycopg
from google.protobuf import timestamp_pb2
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from jobs.v1 import jobs_pb2

_NAME_LINE = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)

# Run in the caller's database; create_table() does it. Shipped as jobs_outbox/outbox.sql.
OUTBOX_DDL = resources.files(__name__).joinpath("outbox.sql").read_text(encoding="utf-8")

# The bounds SubmitJobRequest's fields document (proto/jobs/v1/jobs.proto) that a row can be checked
# against here. What only the API knows (its kinds, its payload limit) it still refuses; the relay then
# ends the row failed with the API's reason.
KIND_PATTERN = re.compile(r"^[a-z][a-z0-9._-]*$")
KIND_MAX_CHARS = 128
IDEMPOTENCY_KEY_MAX_CHARS = 256
PRIORITY_RANGE = (-1000, 1000)
MAX_ATTEMPTS_MAX = 100
RESOURCE_KEY_MAX_CHARS = 512
LABELS_MAX = 32
LABEL_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
LABEL_VALUE_MAX_CHARS = 256
REASON_MAX_CHARS = 500
# The row's action: a submission, or a deletion of its resource key (DeleteResource).
SUBMIT, DELETE_RESOURCE = "submit", "delete_resource"


def _load_blocks() -> dict[str, str]:
    """The named blocks of queries.sql (the service's loader is not a dependency of this package)."""
    text = resources.files(__name__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    return {
        name: "\n".join(body.strip().splitlines()[1:]).strip().rstrip(";")
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


QUERIES = _load_blocks()


class InvalidSubmission(ValueError):
    """A row the job service would refuse for good, caught at enqueue: nothing was written, and the
    caller's transaction is the caller's to roll back."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True)
class Enqueued:
    outbox_id: int
    # What the job's idempotency key is derived from (unless the caller gave a key of its own).
    submission_uid: UUID


def create_table(conn: psycopg.Connection[Any]) -> None:
    """Creates the outbox table and its indexes if missing, or brings an older one up to date (in the
    caller's transaction, if one is open)."""
    conn.execute(OUTBOX_DDL)


@dataclass(frozen=True)
class Submission:
    """One job to submit: SubmitJobRequest's fields, checked against its documented bounds by
    `request()` (which enqueue calls); the API checks the rest when the row is relayed."""

    kind: str
    payload: bytes = b""
    idempotency_key: str | None = None
    priority: int = 0
    run_after: datetime | None = None
    max_attempts: int = 0
    deadline: datetime | None = None
    resource_key: str | None = None
    resource_version: int = 0
    labels: dict[str, str] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        return {**asdict(self), "labels": Jsonb(self.labels)}

    def request(self, submission_uid: UUID | str | None = None) -> jobs_pb2.SubmitJobRequest:
        """The SubmitJobRequest the relay sends, its idempotency key the caller's or derived from the
        row; raises InvalidSubmission naming the first field the API would refuse for good."""
        _check_submission(self)
        try:
            request = jobs_pb2.SubmitJobRequest(
                kind=self.kind,
                payload=self.payload,
                idempotency_key=self.idempotency_key or f"outbox:{submission_uid}",
                priority=self.priority,
                max_attempts=self.max_attempts,
                resource_key=self.resource_key or "",
                resource_version=self.resource_version,
                labels=self.labels,
            )
            for name in ("run_after", "deadline"):
                moment = getattr(self, name)
                if moment is not None:
                    stamp = timestamp_pb2.Timestamp()
                    stamp.FromDatetime(moment)
                    getattr(request, name).CopyFrom(stamp)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidSubmission("submission", f"cannot be sent: {exc}") from None
        return request


def _check_submission(s: Submission) -> None:
    _check_type("kind", s.kind, str)
    if not KIND_PATTERN.fullmatch(s.kind) or len(s.kind) > KIND_MAX_CHARS:
        raise InvalidSubmission("kind", f"must match {KIND_PATTERN.pattern}, at most {KIND_MAX_CHARS} characters")
    _check_type("payload", s.payload, bytes)
    if s.idempotency_key is not None:
        _check_text("idempotency_key", s.idempotency_key, IDEMPOTENCY_KEY_MAX_CHARS)
    _check_range("priority", s.priority, *PRIORITY_RANGE)
    _check_range("max_attempts", s.max_attempts, 0, MAX_ATTEMPTS_MAX)
    for name in ("run_after", "deadline"):
        moment = getattr(s, name)
        if moment is not None and (not isinstance(moment, datetime) or moment.utcoffset() is None):
            raise InvalidSubmission(name, "must be a datetime with a time zone")
    if s.run_after is not None and s.deadline is not None and s.deadline <= s.run_after:
        raise InvalidSubmission("deadline", "must be later than run_after")
    _check_range("resource_version", s.resource_version, 0, 2**63 - 1)
    if s.resource_key:
        _check_text("resource_key", s.resource_key, RESOURCE_KEY_MAX_CHARS)
        if s.resource_version < 1:
            raise InvalidSubmission("resource_version", "must be at least 1 when resource_key is set")
    elif s.resource_version:
        raise InvalidSubmission("resource_version", "must be 0 unless resource_key is set")
    _check_labels(s.labels)


def _check_labels(labels: object) -> None:
    if not isinstance(labels, dict):
        raise InvalidSubmission("labels", f"must be a dict of strings, not {type(labels).__name__}")
    if len(labels) > LABELS_MAX:
        raise InvalidSubmission("labels", f"must have at most {LABELS_MAX} entries")
    for key, value in labels.items():
        name = f"labels[{str(key)[:64]!r}]"
        if not isinstance(key, str) or not LABEL_KEY_PATTERN.fullmatch(key):
            raise InvalidSubmission(name, "key must match [A-Za-z0-9][A-Za-z0-9._/-]* (at most 63 characters)")
        _check_text(name, value, LABEL_VALUE_MAX_CHARS)


def _check_type(name: str, value: object, expected: type) -> None:
    if not isinstance(value, expected):
        raise InvalidSubmission(name, f"must be {expected.__name__}, not {type(value).__name__}")


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidSubmission(name, f"must be a whole number from {low} to {high}")


def _check_text(name: str, value: object, max_chars: int) -> None:
    _check_type(name, value, str)
    assert isinstance(value, str)
    if len(value) > max_chars:
        raise InvalidSubmission(name, f"must be at most {max_chars} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise InvalidSubmission(name, "must not contain NUL or control characters")


def enqueue(
    conn: psycopg.Connection[Any],
    *,
    kind: str,
    payload: bytes = b"",
    idempotency_key: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    max_attempts: int = 0,
    deadline: datetime | None = None,
    resource_key: str | None = None,
    resource_version: int = 0,
    labels: dict[str, str] | None = None,
) -> Enqueued:
    """Writes one submission into the outbox on `conn`, inside whatever transaction it has open: the
    submission exists only if that transaction commits. Raises InvalidSubmission, writing nothing, for
    a submission the API would refuse for good by its documented bounds."""
    submission = Submission(
        kind, payload, idempotency_key, priority, run_after, max_attempts, deadline, resource_key,
        resource_version, labels or {},
    )  # fmt: skip
    return enqueue_submission(conn, submission)


def enqueue_submission(conn: psycopg.Connection[Any], submission: Submission) -> Enqueued:
    """`enqueue` with the submission as one value."""
    submission.request()
    # A cursor of its own: the caller's connection may use any row factory.
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(QUERIES["outbox_insert"], submission.params()).fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])


async def enqueue_async(conn: psycopg.AsyncConnection[Any], submission: Submission) -> Enqueued:
    """`enqueue_submission` on an asyncio psycopg connection, inside its open transaction."""
    submission.request()
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(QUERIES["outbox_insert"], submission.params())
        row = await cur.fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])


def enqueue_deletion(conn: psycopg.Connection[Any], *, resource_key: str, reason: str) -> Enqueued:
    """Writes a deletion of `resource_key` (DeleteResource) into the outbox on `conn`, in the caller's
    transaction. The relay sends the rows of one key in the order they were written: every version
    enqueued before the deletion is submitted first and deleted by it; one enqueued after it brings the
    key back, as a new document. Raises InvalidSubmission, writing nothing, for a key or reason out of
    bounds."""
    _check_text("resource_key", resource_key, RESOURCE_KEY_MAX_CHARS)
    if not resource_key:
        raise InvalidSubmission("resource_key", "is required")
    _check_text("reason", reason, REASON_MAX_CHARS)
    if not reason.strip():
        raise InvalidSubmission("reason", "is required: a deletion is recorded with who and why")
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(
            QUERIES["outbox_insert_deletion"], {"resource_key": resource_key, "reason": reason}
        ).fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])
