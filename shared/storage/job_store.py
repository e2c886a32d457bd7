"""Reads and writes of the job aggregate. Takes a connection inside a transaction; returns domain types."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import (
    ClaimedJob,
    Completion,
    ErrorCategory,
    FailOutcome,
    Job,
    JobError,
    JobPage,
    JobResult,
    JobState,
    LeaseRef,
    LeaseStatus,
    ListFilter,
    NewJob,
    PageCursor,
    ReportOutcome,
    refusal_outcome,
)
from shared.storage import queries
from shared.storage.database import Connection


@dataclass(frozen=True)
class InsertParams:
    """What the use-case resolved for a submission beyond the request itself."""

    tenant: TenantId
    actor: str
    max_attempts: int
    backoff_base_seconds: float
    backoff_cap_seconds: float
    request_digest: bytes | None


@dataclass(frozen=True)
class Transition:
    """A job that a sweep moved to a new state."""

    job_id: JobId
    tenant: TenantId
    kind: str
    state: JobState
    attempts: int
    fencing_token: FencingToken


def job_from_row(row: dict[str, Any]) -> Job:
    category = row["last_error_category"]
    labels = row["labels"]
    return Job(
        job_id=JobId(str(row["job_id"])),
        tenant=TenantId(row["tenant"]),
        kind=row["kind"],
        state=JobState(row["state"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        priority=row["priority"],
        created_at=row["created_at"],
        run_after=row["run_after"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        deadline=row["deadline"],
        last_error=JobError(ErrorCategory(category), row["last_error_message"] or "") if category else None,
        cancel_requested=row["cancel_requested"],
        resource_key=row["resource_key"],
        resource_version=row["resource_version"],
        sequence=row["sequence"],
        fencing_token=FencingToken(row["fencing_token"]),
        idempotency_key=row["idempotency_key"],
        depends_on=tuple(JobId(str(d)) for d in row["depends_on"]),
        labels=labels if isinstance(labels, dict) else json.loads(labels),
    )


async def insert_job(conn: Connection, new: NewJob, params: InsertParams) -> Job | None:
    """Inserts; returns None when the tenant already used this idempotency key."""
    cur = await conn.execute(
        queries.JOB_INSERT,
        {
            "tenant": params.tenant,
            "kind": new.kind,
            "payload": new.payload,
            "priority": new.priority,
            "run_after": new.run_after,
            "deadline": new.deadline,
            "max_attempts": params.max_attempts,
            "backoff_base_seconds": params.backoff_base_seconds,
            "backoff_cap_seconds": params.backoff_cap_seconds,
            "idempotency_key": new.idempotency_key,
            "request_digest": params.request_digest,
            "resource_key": new.resource_key,
            "resource_version": new.resource_version,
            "depends_on": list(new.depends_on),
            "labels": Jsonb(new.labels),
            "actor": params.actor,
        },
    )
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def get_by_idempotency_key(
    conn: Connection, tenant: TenantId, key: str
) -> tuple[Job, bytes | None] | None:
    cur = await conn.execute(queries.JOB_GET_BY_IDEMPOTENCY_KEY, {"tenant": tenant, "idempotency_key": key})
    row = await cur.fetchone()
    return (job_from_row(row), row["request_digest"]) if row else None


async def get_job(conn: Connection, tenant: TenantId, job_id: JobId) -> Job | None:
    cur = await conn.execute(queries.JOB_GET, {"tenant": tenant, "job_id": job_id})
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def list_jobs(
    conn: Connection, tenant: TenantId, filters: ListFilter, after: PageCursor | None, page_size: int
) -> JobPage:
    cur = await conn.execute(
        queries.JOB_LIST,
        {
            "tenant": tenant,
            "states": [s.value for s in filters.states],
            "kind": filters.kind,
            "resource_key": filters.resource_key,
            "labels": Jsonb(filters.labels),
            "after_created_at": after.created_at if after else None,
            "after_job_id": after.job_id if after else None,
            "limit": page_size + 1,
        },
    )
    jobs = [job_from_row(row) for row in await cur.fetchall()]
    if len(jobs) <= page_size:
        return JobPage(jobs, None)
    last = jobs[page_size - 1]
    return JobPage(jobs[:page_size], PageCursor(last.created_at, last.job_id))


async def get_result(
    conn: Connection, tenant: TenantId, job_id: JobId
) -> tuple[JobState, JobResult | None] | None:
    """None when the job does not exist for this tenant; otherwise its state and result, if any."""
    cur = await conn.execute(queries.RESULT_GET, {"tenant": tenant, "job_id": job_id})
    row = await cur.fetchone()
    if row is None:
        return None
    if row["payload"] is None:
        return JobState(row["state"]), None
    result = JobResult(
        job_id=JobId(str(row["job_id"])),
        payload=bytes(row["payload"]),
        attempt=row["attempt"],
        fencing_token=FencingToken(row["fencing_token"]),
        created_at=row["created_at"],
    )
    return JobState(row["state"]), result


async def claim_batch(
    conn: Connection, *, worker_id: str, kinds: Sequence[str], limit: int, lease_seconds: float
) -> list[ClaimedJob]:
    cur = await conn.execute(
        queries.JOB_CLAIM_BATCH,
        {"worker_id": worker_id, "kinds": list(kinds), "limit": limit, "lease_seconds": lease_seconds},
    )
    return [
        ClaimedJob(
            job_id=JobId(str(row["job_id"])),
            tenant=TenantId(row["tenant"]),
            kind=row["kind"],
            payload=bytes(row["payload"]),
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            fencing_token=FencingToken(row["fencing_token"]),
            lease_expires_at=row["lease_expires_at"],
            created_at=row["created_at"],
            queued_since=row["queued_since"],
            claimed_at=row["claimed_at"],
        )
        for row in await cur.fetchall()
    ]


def _transitions(rows: list[dict[str, Any]]) -> list[Transition]:
    return [
        Transition(
            JobId(str(r["job_id"])), TenantId(r["tenant"]), r["kind"], JobState(r["state"]),
            r["attempts"], FencingToken(r["fencing_token"]),
        )
        for r in rows
    ]


async def rescue_expired_leases(conn: Connection, *, limit: int) -> list[Transition]:
    cur = await conn.execute(queries.JOB_RESCUE_EXPIRED, {"limit": limit})
    return _transitions(await cur.fetchall())


async def fail_past_deadline(conn: Connection, *, limit: int) -> list[Transition]:
    cur = await conn.execute(queries.JOB_FAIL_PAST_DEADLINE, {"limit": limit})
    return _transitions(await cur.fetchall())


async def _current_states(conn: Connection, job_ids: Sequence[JobId]) -> dict[JobId, JobState]:
    cur = await conn.execute(queries.JOB_LEASE_DIAGNOSE, {"job_ids": list(job_ids)})
    return {JobId(str(r["job_id"])): JobState(r["state"]) for r in await cur.fetchall()}


async def heartbeat(
    conn: Connection, leases: Sequence[LeaseRef], *, lease_seconds: float
) -> list[LeaseStatus]:
    """Extends held leases; for the others says whether the job was cancelled or superseded."""
    cur = await conn.execute(
        queries.JOB_HEARTBEAT_BATCH,
        {
            "job_ids": [lease.job_id for lease in leases],
            "fencing_tokens": [lease.fencing_token for lease in leases],
            "lease_seconds": lease_seconds,
        },
    )
    held = {(str(r["job_id"]), r["fencing_token"]): r for r in await cur.fetchall()}
    lost = [lease.job_id for lease in leases if (lease.job_id, lease.fencing_token) not in held]
    states = await _current_states(conn, lost) if lost else {}
    statuses = []
    for lease in leases:
        row = held.get((lease.job_id, lease.fencing_token))
        state = states.get(lease.job_id)
        statuses.append(
            LeaseStatus(
                job_id=lease.job_id,
                fencing_token=lease.fencing_token,
                held=row is not None,
                cancel_requested=bool(row and row["cancel_requested"]) or state is JobState.CANCELLED,
                superseded=state is JobState.SUPERSEDED,
                lease_expires_at=row["lease_expires_at"] if row else None,
            )
        )
    return statuses


async def complete_batch(
    conn: Connection, *, worker_id: str, completions: Sequence[Completion]
) -> list[ReportOutcome]:
    """One fenced statement for the whole batch; outcomes in input order."""
    cur = await conn.execute(
        queries.JOB_COMPLETE_BATCH,
        {
            "job_ids": [c.job_id for c in completions],
            "fencing_tokens": [c.fencing_token for c in completions],
            "results": [c.result for c in completions],
            "worker_id": worker_id,
        },
    )
    finished = {(str(r["job_id"]), r["fencing_token"]): JobState(r["state"]) for r in await cur.fetchall()}
    refused = [c.job_id for c in completions if (c.job_id, c.fencing_token) not in finished]
    states = await _current_states(conn, refused) if refused else {}
    outcomes = []
    for c in completions:
        state = finished.get((c.job_id, c.fencing_token))
        if state is JobState.SUCCEEDED:
            outcomes.append(ReportOutcome.ACCEPTED)
        elif state is JobState.CANCELLED:
            outcomes.append(ReportOutcome.JOB_CANCELLED)
        else:
            outcomes.append(refusal_outcome(states.get(c.job_id)))
    return outcomes


async def fail_attempt(
    conn: Connection, *, worker_id: str, lease: LeaseRef, error: JobError
) -> FailOutcome | ReportOutcome:
    """The job's next state, or the refusal when the lease is no longer held."""
    cur = await conn.execute(
        queries.JOB_FAIL,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "category": error.category.value,
            "message": error.message,
            "worker_id": worker_id,
        },
    )
    row = await cur.fetchone()
    if row is None:
        return refusal_outcome((await _current_states(conn, [lease.job_id])).get(lease.job_id))
    state = JobState(row["state"])
    next_at: datetime | None = row["run_after"] if state is JobState.RETRY_WAIT else None
    return FailOutcome(state, next_at)


async def release(
    conn: Connection, *, worker_id: str, lease: LeaseRef, started: bool, reason: str
) -> JobState | ReportOutcome:
    cur = await conn.execute(
        queries.JOB_RELEASE,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "started": started,
            "reason": reason,
            "worker_id": worker_id,
        },
    )
    row = await cur.fetchone()
    if row is None:
        return refusal_outcome((await _current_states(conn, [lease.job_id])).get(lease.job_id))
    return JobState(row["state"])
