"""Reads across every tenant for the operator console. Takes a connection in a transaction opened
without a tenant scope; returns domain types."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from shared.domain.ids import JobId
from shared.domain.jobs import JobPage, JobState, PageCursor
from shared.domain.operator_views import JobDetail, JobSearch, Preview, QueueLine, Relative
from shared.storage import queries
from shared.storage.database import Connection
from shared.storage.job_store import job_from_row

_LIKE_SPECIALS = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def contains_pattern(text: str) -> str:
    """An ILIKE pattern that finds `text` literally: its % and _ are no wildcards."""
    return f"%{text.translate(_LIKE_SPECIALS)}%"


async def queue_overview(conn: Connection, *, failed_window_seconds: float) -> list[QueueLine]:
    cur = await conn.execute(queries.OPERATOR_QUEUE_OVERVIEW, {"failed_window_seconds": failed_window_seconds})
    return [QueueLine(**row) for row in await cur.fetchall()]


async def search_jobs(conn: Connection, search: JobSearch, after: PageCursor | None, page_size: int) -> JobPage:
    cur = await conn.execute(
        queries.OPERATOR_JOB_SEARCH,
        {
            "states": [s.value for s in search.states],
            "tenant": search.tenant,
            "kind": search.kind,
            "resource_key": search.resource_key,
            "labels": Jsonb(search.labels),
            "created_from": search.created_from,
            "created_to": search.created_to,
            "error_pattern": contains_pattern(search.error_text) if search.error_text else None,
            "after_created_at": after.created_at if after else None,
            "after_job_id": after.job_id if after else None,
            "limit": page_size + 1,
        },
    )
    jobs = [job_from_row(row) for row in await cur.fetchall()]
    if len(jobs) <= page_size:
        return JobPage(jobs, None)
    last = jobs[page_size - 1]
    return JobPage(jobs[:page_size], PageCursor(last.created_at, last.job_id))


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
