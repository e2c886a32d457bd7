"""Reads and writes of what operators set (limits, tenant weights, pauses), the record of their actions,
and reads of jobs across tenants. Takes a connection inside a transaction; returns domain types.

The cross-tenant reads carry no tenant condition of their own beyond the filter's: run in a transaction
scoped to a tenant (Database.transaction(tenant)), row-level security still confines them to it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from shared.domain.admin import JobFilter, KindPause, KindStatus, Limit, LimitSpec, TenantWeight
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobPage, JobState, PageCursor
from shared.domain.kinds import Executor, KindPolicy
from shared.domain.paging import job_page
from shared.storage import queries
from shared.storage.database import Connection
from shared.storage.job_store import job_from_row


def _limit(row: Mapping[str, Any]) -> Limit:
    spec = LimitSpec(row["key"], row["max_running"], row["rate_per_second"], row["burst"])
    return Limit(spec, row["updated_at"], row["updated_by"])


async def set_limit(conn: Connection, spec: LimitSpec, actor: str) -> Limit:
    cur = await conn.execute(
        queries.LIMIT_SET,
        {
            "key": spec.key,
            "max_running": spec.max_running,
            "rate_per_second": spec.rate_per_second,
            "burst": spec.burst,
            "actor": actor,
        },
    )
    row = await cur.fetchone()
    assert row is not None  # an upsert's RETURNING always has its row
    return _limit(row)


async def delete_limit(conn: Connection, key: str) -> bool:
    """False when the key had no limit."""
    cur = await conn.execute(queries.LIMIT_DELETE, {"key": key})
    return await cur.fetchone() is not None


async def list_limits(conn: Connection) -> list[Limit]:
    cur = await conn.execute(queries.LIMIT_LIST)
    return [_limit(row) for row in await cur.fetchall()]


def _weight(row: Mapping[str, Any]) -> TenantWeight:
    return TenantWeight(TenantId(row["tenant"]), row["weight"], row["updated_at"], row["updated_by"])


async def set_tenant_weight(conn: Connection, tenant: TenantId, weight: int, actor: str) -> TenantWeight:
    cur = await conn.execute(queries.TENANT_WEIGHT_SET, {"tenant": tenant, "weight": weight, "actor": actor})
    row = await cur.fetchone()
    assert row is not None  # an upsert's RETURNING always has its row
    return _weight(row)


async def list_tenant_weights(conn: Connection) -> list[TenantWeight]:
    cur = await conn.execute(queries.TENANT_WEIGHT_LIST)
    return [_weight(row) for row in await cur.fetchall()]


async def pause_kind(conn: Connection, kind: str, actor: str, reason: str) -> None:
    await conn.execute(queries.KIND_PAUSE, {"kind": kind, "actor": actor, "reason": reason})


async def resume_kind(conn: Connection, kind: str) -> bool:
    """False when the kind was not paused."""
    cur = await conn.execute(queries.KIND_RESUME, {"kind": kind})
    return await cur.fetchone() is not None


def _kind_status(row: Mapping[str, Any]) -> KindStatus:
    policy = KindPolicy(
        row["kind"],
        max_attempts=row["max_attempts"],
        backoff_base_seconds=row["backoff_base_seconds"],
        backoff_cap_seconds=row["backoff_cap_seconds"],
        timeout_seconds=row["timeout_seconds"],
        external_side_effects=row["external_side_effects"],
        limit_keys=tuple(row["limit_keys"]),
        executor=Executor(row["executor"]),
    )
    pause = KindPause(row["paused_at"], row["paused_by"], row["pause_reason"]) if row["paused_at"] else None
    return KindStatus(policy, pause, tuple(row["publishers"]), row["policy_conflict"], row["retired_at"])


async def kind_statuses(
    conn: Connection, *, kind: str | None = None, include_retired: bool = False, within_seconds: float
) -> list[KindStatus]:
    """Kinds by name; publishers and conflicts count the replicas seen within `within_seconds`."""
    cur = await conn.execute(
        queries.KIND_STATUS_LIST,
        {"kind": kind, "include_retired": include_retired, "within_seconds": within_seconds},
    )
    return [_kind_status(row) for row in await cur.fetchall()]


async def record_action(
    conn: Connection, *, actor: str, action: str, target: str, reason: str, details: Mapping[str, object]
) -> None:
    """One row in admin_actions; `details` must be JSON-serialisable."""
    await conn.execute(
        queries.ADMIN_ACTION_RECORD,
        {"actor": actor, "action": action, "target": target, "reason": reason, "details": json.dumps(details)},
    )


def _filter_params(job_filter: JobFilter) -> dict[str, object]:
    return {
        "tenant": job_filter.tenant,
        "kind": job_filter.kind,
        "resource_key": job_filter.resource_key,
        "labels": Jsonb(job_filter.labels),
        "error_text": job_filter.error_text,
        "created_after": job_filter.created_after,
        "created_before": job_filter.created_before,
    }


async def search_jobs(conn: Connection, job_filter: JobFilter, after: PageCursor | None, page_size: int) -> JobPage:
    """A page of matching jobs, newest first (created_at, job_id): stable while jobs come and go."""
    cur = await conn.execute(
        queries.ADMIN_JOB_SEARCH,
        {
            **_filter_params(job_filter),
            "states": [s.value for s in job_filter.states],
            "after_created_at": after.created_at if after else None,
            "after_job_id": after.job_id if after else None,
            "limit": page_size + 1,
        },
    )
    return job_page([job_from_row(row) for row in await cur.fetchall()], page_size)


async def match_jobs(
    conn: Connection, job_filter: JobFilter, states: frozenset[JobState], *, limit: int
) -> list[tuple[JobId, TenantId]]:
    """Up to `limit` jobs the filter matches among `states` (the filter's own states narrow them
    further), oldest first."""
    wanted = states & frozenset(job_filter.states) if job_filter.states else states
    cur = await conn.execute(
        queries.ADMIN_JOB_MATCH,
        {**_filter_params(job_filter), "states": sorted(s.value for s in wanted), "limit": limit},
    )
    return [(JobId(str(row["job_id"])), TenantId(row["tenant"])) for row in await cur.fetchall()]


async def job_tenant(conn: Connection, job_id: JobId) -> TenantId | None:
    cur = await conn.execute(queries.ADMIN_JOB_TENANT, {"job_id": job_id})
    row = await cur.fetchone()
    return TenantId(row["tenant"]) if row else None
