"""Deleting finished jobs after the retention period, in small batches any replica may run."""

from __future__ import annotations

from shared.storage.database import Connection
from shared.storage.sql_loader import load_sql_blocks

_retention = load_sql_blocks("retention.sql")
JOB_DELETE_FINISHED = _retention.pop("job_delete_finished")
if _retention:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_retention)}")


async def delete_finished_jobs(conn: Connection, *, retention_seconds: float, limit: int) -> int:
    """Deletes up to `limit` jobs (with events and results) that finished over `retention_seconds` ago."""
    cur = await conn.execute(JOB_DELETE_FINISHED, {"retention_seconds": retention_seconds, "limit": limit})
    return len(await cur.fetchall())
