"""Delivery sets in the database: headers, members by name, and one-snapshot reads of a set's jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.domain.delivery_sets import FailurePolicy
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import Job, JobResult
from shared.storage import queries
from shared.storage.database import Connection
from shared.storage.job_store import job_from_row


@dataclass(frozen=True)
class SetHeader:
    set_id: str
    resource_key: str
    resource_version: int
    failure_policy: FailurePolicy
    fan_in_job_id: JobId | None
    member_count: int
    created_at: datetime


@dataclass(frozen=True)
class SetRow:
    """A member (named) or the fan-in (name None), with the size of its stored result if it has one."""

    name: str | None
    job: Job
    result_bytes: int | None


def _header(row: dict[str, Any]) -> SetHeader:
    fan_in = row["fan_in_job_id"]
    return SetHeader(
        str(row["set_id"]),
        row["resource_key"],
        row["resource_version"],
        FailurePolicy(row["failure_policy"]),
        JobId(str(fan_in)) if fan_in else None,
        row["member_count"],
        row["created_at"],
    )


async def get_header(conn: Connection, tenant: TenantId, resource_key: str, resource_version: int) -> SetHeader | None:
    """The set of that version; with version 0, of the highest version a set was submitted for."""
    params = {"tenant": tenant, "resource_key": resource_key, "resource_version": resource_version}
    query = queries.DELIVERY_SET_GET_BY_VERSION if resource_version else queries.DELIVERY_SET_GET_HIGHEST
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return _header(row) if row else None


async def insert(
    conn: Connection,
    *,
    tenant: TenantId,
    actor: str,
    resource_key: str,
    resource_version: int,
    policy: FailurePolicy,
    fan_in: JobId | None,
    members: Sequence[tuple[str, JobId]],
) -> SetHeader:
    cur = await conn.execute(
        queries.DELIVERY_SET_INSERT,
        {
            "tenant": tenant,
            "actor": actor,
            "resource_key": resource_key,
            "resource_version": resource_version,
            "failure_policy": policy.value,
            "fan_in_job_id": fan_in,
            "member_count": len(members),
        },
    )
    row = await cur.fetchone()
    assert row is not None  # an insert without ON CONFLICT returns its row or raises
    header = _header(row)
    await conn.execute(
        queries.DELIVERY_SET_MEMBERS_INSERT,
        {"set_id": header.set_id, "names": [n for n, _ in members], "job_ids": [j for _, j in members]},
    )
    return header


async def get_header_by_id(conn: Connection, tenant: TenantId, set_id: str) -> SetHeader | None:
    cur = await conn.execute(queries.DELIVERY_SET_GET_BY_ID, {"tenant": tenant, "set_id": set_id})
    row = await cur.fetchone()
    return _header(row) if row else None


async def read_rows(conn: Connection, tenant: TenantId, set_id: str) -> list[SetRow]:
    """Members by name, then the fan-in, all from one statement's snapshot."""
    cur = await conn.execute(queries.DELIVERY_SET_MEMBERS_READ, {"tenant": tenant, "set_id": set_id})
    return [SetRow(row["name"], job_from_row(row), row["result_bytes"]) for row in await cur.fetchall()]


async def read_results(conn: Connection, tenant: TenantId, job_ids: Sequence[JobId]) -> dict[JobId, JobResult]:
    """The stored results of these jobs of the tenant (a job without one is missing from the answer)."""
    if not job_ids:
        return {}
    cur = await conn.execute(queries.DELIVERY_SET_RESULTS_READ, {"tenant": tenant, "job_ids": list(job_ids)})
    results = {}
    for row in await cur.fetchall():
        job_id = JobId(str(row["job_id"]))
        results[job_id] = JobResult(
            job_id, bytes(row["payload"]), row["attempt"], FencingToken(row["fencing_token"]), row["created_at"]
        )
    return results
