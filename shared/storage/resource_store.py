"""Tombstones of resource keys: what DeleteResource writes, in one transaction under the key's lock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.domain.ids import JobId, TenantId
from shared.storage import queries
from shared.storage.database import Connection


@dataclass(frozen=True)
class Deletion:
    resource_key: str
    deleted_version: int
    cancelled: list[JobId]
    deleted_results: int
    deleted_at: datetime


async def delete_resource(
    conn: Connection, *, tenant: TenantId, resource_key: str, actor: str, reason: str
) -> Deletion | None:
    """Writes the tombstone over every version submitted so far, cancels their unfinished jobs, deletes their
    results and records who and why; None when the tenant never submitted the key. The head is locked
    first, as a submission of the key locks it, so a submission either commits before (and its job is
    cancelled here) or waits and sees the tombstone."""
    key = {"tenant": tenant, "resource_key": resource_key}
    cur = await conn.execute(queries.RESOURCE_HEAD_LOCK_EXISTING, key)
    if await cur.fetchone() is None:
        return None
    cur = await conn.execute(queries.RESOURCE_TOMBSTONE_WRITE, key)
    row = await cur.fetchone()
    assert row is not None  # the head is locked above
    scope = {**key, "deleted_version": row["deleted_version"], "actor": actor, "reason": reason}
    cur = await conn.execute(queries.JOB_CANCEL_DELETED_RESOURCE, scope)
    cancelled = [JobId(str(r["job_id"])) for r in await cur.fetchall()]
    cur = await conn.execute(queries.RESULT_DELETE_DELETED_RESOURCE, scope)
    deleted_results = len(await cur.fetchall())
    cur = await conn.execute(
        queries.RESOURCE_DELETION_RECORD,
        {**scope, "cancelled_jobs": len(cancelled), "deleted_results": deleted_results},
    )
    recorded = await cur.fetchone()
    assert recorded is not None
    return Deletion(resource_key, row["deleted_version"], cancelled, deleted_results, recorded["deleted_at"])
