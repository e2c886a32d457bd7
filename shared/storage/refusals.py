"""Why fenced statements refused reports: the one reading every report path uses after its statement
found no running row under the caller's token. The answer is a ReportOutcome value all the way to the
worker; only the single-report RPCs turn it into an error, at the API's edge."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.ids import JobId
from shared.domain.jobs import JobState, ReportOutcome, refusal_outcome
from shared.storage import queries
from shared.storage.database import Connection


async def refusals(conn: Connection, job_ids: Sequence[JobId]) -> dict[JobId, ReportOutcome]:
    """Each named job's refusal, read after the refusing statement; a job not found lost its lease."""
    if not job_ids:
        return {}
    cur = await conn.execute(queries.JOB_LEASE_DIAGNOSE, {"job_ids": list(job_ids)})
    found = {
        JobId(str(r["job_id"])): refusal_outcome(JobState(r["state"]), resource_deleted=r["resource_deleted"])
        for r in await cur.fetchall()
    }
    return {job_id: found.get(job_id, ReportOutcome.LEASE_LOST) for job_id in job_ids}


async def refusal(conn: Connection, job_id: JobId) -> ReportOutcome:
    return (await refusals(conn, [job_id]))[job_id]
