"""Progress of running attempts: many reports in one fenced statement, read back for GetJob and WatchJob."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.checkpoints import Progress, ProgressReport
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import ReportOutcome
from shared.storage.database import Connection
from shared.storage.refusals import refusals
from shared.storage.sql_loader import load_sql_blocks

_progress = load_sql_blocks("progress.sql")
PROGRESS_RECORD_BATCH = _progress.pop("progress_record_batch")
PROGRESS_GET = _progress.pop("progress_get")
if _progress:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_progress)}")


async def record_batch(conn: Connection, reports: Sequence[ProgressReport]) -> list[ReportOutcome]:
    """Per-report outcomes in input order; a refused report changes nothing."""
    cur = await conn.execute(
        PROGRESS_RECORD_BATCH,
        {
            "job_ids": [r.lease.job_id for r in reports],
            "fencing_tokens": [r.lease.fencing_token for r in reports],
            "fractions": [r.fraction for r in reports],
            "messages": [r.message for r in reports],
        },
    )
    written = {(str(row["job_id"]), row["fencing_token"]) for row in await cur.fetchall()}
    refused = await refusals(
        conn, [r.lease.job_id for r in reports if (r.lease.job_id, r.lease.fencing_token) not in written]
    )
    return [refused.get(r.lease.job_id, ReportOutcome.ACCEPTED) for r in reports]


async def get(conn: Connection, tenant: TenantId, job_id: JobId) -> Progress | None:
    cur = await conn.execute(PROGRESS_GET, {"tenant": tenant, "job_id": job_id})
    row = await cur.fetchone()
    if row is None:
        return None
    return Progress(row["fraction"], row["message"], row["attempt"], row["updated_at"])
