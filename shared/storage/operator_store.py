"""Reads across every tenant for the operator console. Takes a connection in a transaction opened
without a tenant scope; returns domain types."""

from __future__ import annotations

from shared.domain.ids import JobId
from shared.domain.jobs import JobState
from shared.domain.operator_views import JobDetail, Preview, QueueLine, Relative
from shared.storage import queries
from shared.storage.database import Connection
from shared.storage.job_store import job_from_row


async def queue_overview(conn: Connection, *, failed_window_seconds: float) -> list[QueueLine]:
    cur = await conn.execute(queries.OPERATOR_QUEUE_OVERVIEW, {"failed_window_seconds": failed_window_seconds})
    return [QueueLine(**row) for row in await cur.fetchall()]


async def get_job_detail(conn: Connection, job_id: JobId, *, preview_bytes: int) -> JobDetail | None:
    """The job with its payload and result heads; its history, receipts and relatives are left empty."""
    cur = await conn.execute(queries.OPERATOR_JOB_GET, {"job_id": job_id, "preview_bytes": preview_bytes})
    row = await cur.fetchone()
    if row is None:
        return None
    result = None
    if row["result_head"] is not None:
        result = Preview(bytes(row["result_head"]), row["result_bytes"])
    return JobDetail(
        job=job_from_row(row),
        payload=Preview(bytes(row["payload_head"]), row["payload_bytes"]),
        result=result,
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        duplicate_risk=row["duplicate_risk"],
        events=[],
        receipts=[],
        relatives=[],
    )


async def relatives(conn: Connection, job_id: JobId, depends_on: tuple[JobId, ...]) -> list[Relative]:
    cur = await conn.execute(queries.OPERATOR_JOB_RELATIVES, {"job_id": job_id, "depends_on": list(depends_on)})
    return [
        Relative(JobId(str(r["job_id"])), r["kind"], JobState(r["state"]), r["is_dependency"])
        for r in await cur.fetchall()
    ]
