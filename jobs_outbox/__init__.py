"""Transactional enqueue for services with their own PostgreSQL database.

Write the submission into the outbox table in the same transaction as your own changes; the relay
(`python -m jobs_outbox.relay`) submits it to the job service after commit, with an idempotency key
derived from the row, so a crash anywhere yields the job exactly once:

    with conn.transaction():
        conn.execute("UPDATE documents SET version = version + 1 WHERE id = %s", (doc_id,))
        jobs_outbox.enqueue(conn, kind="index-document", payload=doc_id.encode())

This package depends on psycopg and the SDK (durable-jobs-sdk) only, never on the service's code.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

_NAME_LINE = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)

# Run in the caller's database; create_table() does it. Shipped as jobs_outbox/outbox.sql.
OUTBOX_DDL = resources.files(__name__).joinpath("outbox.sql").read_text(encoding="utf-8")


def _load_blocks() -> dict[str, str]:
    """The named blocks of queries.sql (the service's loader is not a dependency of this package)."""
    text = resources.files(__name__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    return {
        name: "\n".join(body.strip().splitlines()[1:]).strip().rstrip(";")
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


QUERIES = _load_blocks()


@dataclass(frozen=True)
class Enqueued:
    outbox_id: int
    # What the job's idempotency key is derived from (unless the caller gave a key of its own).
    submission_uid: UUID


def create_table(conn: psycopg.Connection[Any]) -> None:
    """Creates the outbox table and its index if missing (in the caller's transaction, if one is open)."""
    conn.execute(OUTBOX_DDL)


@dataclass(frozen=True)
class Submission:
    """One job to submit: SubmitJobRequest's fields, checked by the API when the row is relayed."""

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
    submission exists only if that transaction commits."""
    submission = Submission(
        kind, payload, idempotency_key, priority, run_after, max_attempts, deadline, resource_key,
        resource_version, labels or {},
    )  # fmt: skip
    return enqueue_submission(conn, submission)


def enqueue_submission(conn: psycopg.Connection[Any], submission: Submission) -> Enqueued:
    """`enqueue` with the submission as one value."""
    # A cursor of its own: the caller's connection may use any row factory.
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(QUERIES["outbox_insert"], submission.params()).fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])


async def enqueue_async(conn: psycopg.AsyncConnection[Any], submission: Submission) -> Enqueued:
    """`enqueue_submission` on an asyncio psycopg connection, inside its open transaction."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(QUERIES["outbox_insert"], submission.params())
        row = await cur.fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])
