"""Reads across every tenant for the operator console. Takes a connection in a transaction opened
without a tenant scope; returns domain types."""

from __future__ import annotations

from typing import Any

from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobState
from shared.domain.operator_views import JobDetail, Preview, QueueLine, Relative
from shared.storage import job_store, queries
from shared.storage.database import Connection


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
        job=job_store.job_from_row(row),
        payload=Preview(bytes(row["payload_head"]), row["payload_bytes"]),
        result=result,
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        duplicate_risk=row["duplicate_risk"],
        events=[],
        receipts=[],
        dependencies=[],
        dependents=[],
    )


async def dependencies(conn: Connection, depends_on: tuple[JobId, ...]) -> list[Relative]:
    """The jobs one job waits for: at most a submission's dependency bound."""
    cur = await conn.execute(queries.OPERATOR_JOB_DEPENDENCIES, {"depends_on": list(depends_on)})
    return [_relative(r) for r in await cur.fetchall()]


async def sequence_queue(conn: Connection, tenant: TenantId, sequence_key: str, *, limit: int) -> list[Relative]:
    """Up to `limit` of the jobs still holding a tenant's sequence, its head first."""
    rows = await job_store.sequence_rows(conn, tenant, sequence_key, limit=limit)
    return [Relative(JobId(str(r["job_id"])), r["kind"], JobState(r["state"]), False) for r in rows]


async def dependents_page(conn: Connection, job_id: JobId, *, after: JobId | None, limit: int) -> list[Relative]:
    """Up to `limit` of the jobs waiting for `job_id`, in job id order after `after`."""
    cur = await conn.execute(
        queries.OPERATOR_JOB_DEPENDENTS_PAGE, {"job_id": job_id, "after_job_id": after, "limit": limit}
    )
    return [_relative(r) for r in await cur.fetchall()]


async def children_page(conn: Connection, job_id: JobId, *, after: JobId | None, limit: int) -> list[Relative]:
    """Up to `limit` of the jobs `job_id` spawned, in job id order after `after`."""
    cur = await conn.execute(
        queries.OPERATOR_JOB_CHILDREN_PAGE, {"job_id": job_id, "after_job_id": after, "limit": limit}
    )
    return [_relative(r) for r in await cur.fetchall()]


def _relative(row: dict[str, Any]) -> Relative:
    return Relative(JobId(str(row["job_id"])), row["kind"], JobState(row["state"]), row["is_dependency"])
