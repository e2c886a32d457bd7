"""Stage checkpoints: written under the lease's fence by the API, read by workers at claim and by GetJob."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.domain.checkpoints import Checkpoint
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import LeaseRef, ReportOutcome
from shared.storage.database import Connection
from shared.storage.refusals import refusal
from shared.storage.sql_loader import load_sql_blocks

_checkpoints = load_sql_blocks("checkpoints.sql")
CHECKPOINT_RECORD = _checkpoints.pop("checkpoint_record")
CHECKPOINT_LIST_FOR_JOBS = _checkpoints.pop("checkpoint_list_for_jobs")
CHECKPOINT_LIST = _checkpoints.pop("checkpoint_list")
CHECKPOINT_CLEAR = _checkpoints.pop("checkpoint_clear")
if _checkpoints:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_checkpoints)}")


class NoRoomForStage(Exception):
    """The job already holds as many stages as allowed; nothing was written."""


def _checkpoint(row: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        stage=row["stage"],
        data=bytes(row["data"]),
        attempt=row["attempt"],
        fencing_token=FencingToken(row["fencing_token"]),
        at=row["at"],
    )


async def record(
    conn: Connection, lease: LeaseRef, stage: str, data: bytes, *, max_stages: int
) -> Checkpoint | ReportOutcome:
    """The stored checkpoint, or the refusal when the lease is not held; NoRoomForStage when full."""
    cur = await conn.execute(
        CHECKPOINT_RECORD,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "stage": stage,
            "data": data,
            "max_stages": max_stages,
        },
    )
    row = await cur.fetchone()
    assert row is not None  # the statement always answers one row
    if not row["held"]:
        return await refusal(conn, lease.job_id)
    if row["stage"] is None:
        raise NoRoomForStage()
    return _checkpoint(row)


async def for_jobs(conn: Connection, job_ids: Sequence[JobId]) -> dict[JobId, tuple[Checkpoint, ...]]:
    """Every checkpoint of the named jobs, oldest first per job; jobs without any are absent."""
    cur = await conn.execute(CHECKPOINT_LIST_FOR_JOBS, {"job_ids": list(job_ids)})
    found: dict[JobId, list[Checkpoint]] = {}
    for row in await cur.fetchall():
        found.setdefault(JobId(str(row["job_id"])), []).append(_checkpoint(row))
    return {job_id: tuple(items) for job_id, items in found.items()}


async def list_for_job(conn: Connection, tenant: TenantId, job_id: JobId) -> tuple[Checkpoint, ...]:
    cur = await conn.execute(CHECKPOINT_LIST, {"tenant": tenant, "job_id": job_id})
    return tuple(_checkpoint(row) for row in await cur.fetchall())


async def clear(conn: Connection, tenant: TenantId, job_id: JobId) -> None:
    await conn.execute(CHECKPOINT_CLEAR, {"tenant": tenant, "job_id": job_id})
