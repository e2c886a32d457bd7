"""Deleting finished jobs after the retention period, in small batches any replica may run."""

from __future__ import annotations

from shared.storage.database import Connection
from shared.storage.sql_loader import load_sql_blocks

_retention = load_sql_blocks("retention.sql")
JOB_RETENTION_LOCK = _retention.pop("job_retention_lock")
JOB_DELETE_FINISHED = _retention.pop("job_delete_finished")
if _retention:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_retention)}")


async def delete_finished_jobs(conn: Connection, *, retention_seconds: float, limit: int) -> int:
    """Deletes up to `limit` jobs (with events and results) that finished over `retention_seconds` ago
    and that no job depends on. Two statements: the delete re-checks for dependents with a snapshot
    taken after the candidates were locked, so a dependent committed meanwhile is never missed."""
    cur = await conn.execute(JOB_RETENTION_LOCK, {"retention_seconds": retention_seconds, "limit": limit})
    job_ids = [row["job_id"] for row in await cur.fetchall()]
    if not job_ids:
        return 0
    cur = await conn.execute(JOB_DELETE_FINISHED, {"job_ids": job_ids, "retention_seconds": retention_seconds})
    return len(await cur.fetchall())
