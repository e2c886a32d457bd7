"""What a running job's handler reads of the jobs it depends on: fenced by its lease, in pages bounded in bytes."""

from __future__ import annotations

from dataclasses import dataclass

from shared.domain.ids import FencingToken, JobId
from shared.storage import queries
from shared.storage.database import Connection


@dataclass(frozen=True)
class DependencyResultsPage:
    results: list[tuple[JobId, bytes]]
    # The after_job_id of the next page; None on the last.
    next_after: JobId | None


async def read_page(
    conn: Connection, *, job_id: JobId, fencing_token: FencingToken, after: JobId | None, max_bytes: int
) -> DependencyResultsPage | None:
    """None when the lease is not the job's current one: the check is in the statement that reads."""
    cur = await conn.execute(
        queries.DEPENDENCY_RESULTS_PAGE,
        {"job_id": job_id, "fencing_token": fencing_token, "after_job_id": after, "max_bytes": max_bytes},
    )
    rows = await cur.fetchall()
    if not rows:
        return None
    results = [(JobId(str(r["job_id"])), bytes(r["payload"])) for r in rows if r["job_id"] is not None]
    more = bool(results) and rows[0]["remaining"] > len(results)
    return DependencyResultsPage(results, results[-1][0] if more else None)
