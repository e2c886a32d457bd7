"""Schedules and their fire records in PostgreSQL."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from shared.domain.ids import JobId, TenantId
from shared.domain.schedules import CronSpec, FireStep, JobTemplate, NewSchedule, OverlapPolicy, Schedule
from shared.storage import queries
from shared.storage.database import Connection

CLAIM_BATCH_SIZE_DEFAULT = 20
# The oldest due schedules a claim shares out in turns, ten claims' worth: ranking every due schedule by
# tenant took 147 ms per claim with 10,000 due, these 4 to 11 ms (the oldest-due walk alone 1 to 3 ms).
# A tenant whose fires were refused is left out before the window is taken, so a backlog it may not fire
# never fills the window; a backlog it does fire drains oldest first.
CLAIM_WINDOW = 200


def schedule_from_row(row: dict[str, Any]) -> Schedule:
    return Schedule(
        tenant=TenantId(row["tenant"]),
        schedule_id=row["schedule_id"],
        schedule_uid=row["schedule_uid"],
        template=JobTemplate(
            kind=row["kind"],
            payload=bytes(row["payload"]),
            priority=row["priority"],
            max_attempts=row["max_attempts"],
            labels=dict(row["labels"]),
            limit_keys=tuple(row["limit_keys"]),
        ),
        spec=CronSpec(row["cron"], row["time_zone"]),
        overlap=OverlapPolicy(row["overlap_policy"]),
        catchup_window_seconds=row["catchup_window_seconds"],
        paused=row["paused"],
        note=row["note"],
        next_fire_at=row["next_fire_at"],
        buffered_fire_at=row["buffered_fire_at"],
        last_fire_at=row["last_fire_at"],
        last_job_id=JobId(str(row["last_job_id"])) if row["last_job_id"] else None,
        fires_submitted=row["fires_submitted"],
        fires_missed=row["fires_missed"],
        fires_skipped=row["fires_skipped"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        created_by=row["created_by"],
    )


async def clock(conn: Connection) -> datetime:
    cur = await conn.execute(queries.SCHEDULE_CLOCK)
    row = await cur.fetchone()
    assert row is not None
    now: datetime = row["now"]
    return now


async def insert(
    conn: Connection, tenant: TenantId, actor: str, new: NewSchedule, next_fire_at: datetime
) -> Schedule | None:
    """None when the tenant already has a schedule with this id."""
    cur = await conn.execute(
        queries.SCHEDULE_INSERT,
        {
            "tenant": tenant,
            "schedule_id": new.schedule_id,
            "cron": new.spec.cron,
            "time_zone": new.spec.time_zone,
            "overlap_policy": new.overlap.value,
            "catchup_window_seconds": new.catchup_window_seconds,
            "kind": new.template.kind,
            "payload": new.template.payload,
            "priority": new.template.priority,
            "max_attempts": new.template.max_attempts,
            "labels": Jsonb(new.template.labels),
            "limit_keys": list(new.template.limit_keys),
            "paused": new.paused,
            "note": new.note,
            "next_fire_at": next_fire_at,
            "created_by": actor,
        },
    )
    row = await cur.fetchone()
    return schedule_from_row(row) if row else None


async def get(conn: Connection, tenant: TenantId, schedule_id: str, *, lock: bool = False) -> Schedule | None:
    query = queries.SCHEDULE_LOCK if lock else queries.SCHEDULE_GET
    cur = await conn.execute(query, {"tenant": tenant, "schedule_id": schedule_id})
    row = await cur.fetchone()
    return schedule_from_row(row) if row else None


async def list_page(conn: Connection, tenant: TenantId, after_id: str, limit: int) -> list[Schedule]:
    cur = await conn.execute(queries.SCHEDULE_LIST, {"tenant": tenant, "after_id": after_id, "limit": limit})
    return [schedule_from_row(row) for row in await cur.fetchall()]


async def set_paused(
    conn: Connection, tenant: TenantId, schedule_id: str, *, paused: bool, note: str, next_fire_at: datetime | None
) -> Schedule | None:
    cur = await conn.execute(
        queries.SCHEDULE_SET_PAUSED,
        {"tenant": tenant, "schedule_id": schedule_id, "paused": paused, "note": note, "next_fire_at": next_fire_at},
    )
    row = await cur.fetchone()
    return schedule_from_row(row) if row else None


async def delete(conn: Connection, tenant: TenantId, schedule_id: str) -> bool:
    cur = await conn.execute(queries.SCHEDULE_DELETE, {"tenant": tenant, "schedule_id": schedule_id})
    return await cur.fetchone() is not None


async def claim_due(
    conn: Connection, limit: int = CLAIM_BATCH_SIZE_DEFAULT, *, deferred_tenants: Collection[TenantId] = ()
) -> list[tuple[Schedule, datetime]]:
    """Due schedules, locked until commit, each with the database clock at the claim: taken in turns
    across tenants (weighted), leaving out `deferred_tenants`."""
    params = {"limit": limit, "window": max(limit, CLAIM_WINDOW), "deferred_tenants": list(deferred_tenants)}
    cur = await conn.execute(queries.SCHEDULE_CLAIM_DUE, params)
    return [(schedule_from_row(row), row["claimed_at"]) for row in await cur.fetchall()]


@dataclass(frozen=True)
class StepRecord:
    """What a fire step changed, as the schedule row keeps it."""

    step: FireStep
    job_id: JobId | None
    submitted: int
    skipped: int
    last_error: str
    # What the fire's record says ("submitted", "skipped", …); empty when the step fired nothing.
    outcome: str = ""


async def record_step(conn: Connection, schedule: Schedule, record: StepRecord) -> None:
    step = record.step
    await conn.execute(
        queries.SCHEDULE_RECORD_STEP,
        {
            "schedule_uid": schedule.schedule_uid,
            "next_fire_at": step.next_fire_at,
            "buffered_fire_at": step.buffered_fire_at,
            "fired_at": step.fire_at if record.job_id else None,
            "job_id": record.job_id,
            "submitted": record.submitted,
            "missed": step.missed,
            "skipped": record.skipped,
            "last_error": record.last_error,
        },
    )


async def record_fire(
    conn: Connection,
    schedule: Schedule,
    fire_at: datetime,
    outcome: str,
    *,
    job_id: JobId | None = None,
    detail: str = "",
    manual: bool = False,
) -> None:
    await conn.execute(
        queries.SCHEDULE_FIRE_RECORD,
        {
            "schedule_uid": schedule.schedule_uid,
            "fire_at": fire_at,
            "manual": manual,
            "tenant": schedule.tenant,
            "outcome": outcome,
            "job_id": job_id,
            "detail": detail,
        },
    )


async def prune_fires(conn: Connection, *, kept_seconds: float, limit: int) -> int:
    """Deletes up to `limit` fire records older than `kept_seconds`; how many went."""
    cur = await conn.execute(queries.SCHEDULE_FIRES_PRUNE, {"kept_seconds": kept_seconds, "limit": limit})
    return cur.rowcount


async def record_manual_fire(conn: Connection, schedule: Schedule, fire_at: datetime, job_id: JobId) -> None:
    """A trigger's fire: counted and remembered as the latest job, the cron times untouched."""
    await record_fire(conn, schedule, fire_at, "submitted", job_id=job_id, manual=True)
    await conn.execute(
        queries.SCHEDULE_RECORD_STEP,
        {
            "schedule_uid": schedule.schedule_uid,
            "next_fire_at": schedule.next_fire_at,
            "buffered_fire_at": schedule.buffered_fire_at,
            "fired_at": fire_at,
            "job_id": job_id,
            "submitted": 1,
            "missed": 0,
            "skipped": 0,
            "last_error": schedule.last_error,
        },
    )
