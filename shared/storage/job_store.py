"""Reads and writes of the job aggregate. Takes a connection inside a transaction; returns domain types."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg import AsyncCursor
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from shared.domain.ids import FencingToken, JobId, TenantId, job_ids_from_block, new_job_id_block, new_job_ids
from shared.domain.jobs import (
    ErrorCategory,
    Job,
    JobError,
    JobEvent,
    JobPage,
    JobResult,
    JobState,
    LeaseRef,
    ListFilter,
    NewJob,
    PageCursor,
    PlainBatch,
)
from shared.domain.kinds import KindPolicy
from shared.domain.paging import job_page
from shared.domain.trace_context import TraceContext
from shared.storage import binary_arrays, queries
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
    state: JobState = JobState.PENDING
    error: JobError | None = None
    reason: str = "submitted"
    # Set for a submission that asked for de-duplication by input (idempotency.input_digest).
    input_digest: bytes | None = None
    # A delivery set's fan-in under wait_for_manual_retry: a failed member leaves it blocked.
    waits_for_manual_retry: bool = False
    # A spawned child's id (made by its worker) and its parent's; the database makes a submission's id.
    job_id: JobId | None = None
    parent_job_id: JobId | None = None


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
        sequence_key=row.get("sequence_key"),
        singleton_key=row.get("singleton_key"),
        debounce_key=row.get("debounce_key"),
        parent_job_id=JobId(str(parent)) if (parent := row.get("parent_job_id")) else None,
    )


async def insert_job(conn: Connection, new: NewJob, params: InsertParams) -> Job | None:
    """Inserts; returns None when the tenant already used this idempotency key."""
    cur = await conn.execute(
        queries.JOB_INSERT,
        {
            "job_id": params.job_id,
            "parent_job_id": params.parent_job_id,
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
            "input_digest": params.input_digest,
            "resource_key": new.resource_key,
            "resource_version": new.resource_version,
            "depends_on": list(new.depends_on),
            "labels": Jsonb(new.labels),
            "actor": params.actor,
            "state": params.state.value,
            "error_category": params.error.category.value if params.error else None,
            "error_message": params.error.message if params.error else None,
            "reason": params.reason,
            "traceparent": new.trace_context.traceparent if new.trace_context else None,
            "tracestate": new.trace_context.tracestate if new.trace_context else None,
            "waits_for_manual_retry": params.waits_for_manual_retry,
            "singleton_key": new.singleton_key,
            "debounce_key": new.debounce.key if new.debounce else None,
            "debounce_quiet_seconds": new.debounce.quiet_seconds if new.debounce else None,
            "debounce_max_wait_seconds": new.debounce.max_wait_seconds if new.debounce else None,
        },
    )
    row = await cur.fetchone()
    return job_from_row(row) if row else None


@dataclass(frozen=True)
class PlainInsert:
    """A submission without idempotency key, resource or dependencies, with its resolved defaults."""

    job: NewJob
    max_attempts: int
    backoff_base_seconds: float
    backoff_cap_seconds: float


async def insert_many(
    conn: Connection,
    tenant: TenantId,
    actor: str,
    items: Sequence[PlainInsert],
    *,
    spawned: tuple[JobId, Sequence[JobId]] | None = None,
) -> list[Job]:
    """One statement for the lot; jobs come back in input order (ids are chosen here, time-ordered, or
    given: `spawned` is a parent's id and its children's ids, which their worker made). Each job is built
    from its submission and the few columns the database fills in: reading the whole row back and
    decoding it was an eighth of the API's time per `SubmitJob`."""
    parent, job_ids = (spawned[0], [uuid.UUID(j) for j in spawned[1]]) if spawned else (None, new_job_ids(len(items)))
    params = {**_insert_many_params(tenant, actor, job_ids, items), "parent_job_id": parent}
    cur = await conn.execute(queries.JOB_INSERT_MANY, params)
    stored = {row["job_id"]: row for row in await cur.fetchall()}
    return [
        _new_plain_job(tenant, job_id, item, stored[job_id], parent)
        for job_id, item in zip(job_ids, items, strict=True)
    ]


def _new_plain_job(
    tenant: TenantId, job_id: uuid.UUID, item: PlainInsert, row: dict[str, Any], parent: JobId | None = None
) -> Job:
    """The row job_insert_many wrote: the submission, the table's defaults and what came back."""
    job = item.job
    return Job(
        job_id=JobId(str(job_id)),
        tenant=tenant,
        kind=job.kind,
        state=JobState.PENDING,
        attempts=0,
        max_attempts=item.max_attempts,
        priority=job.priority,
        created_at=row["created_at"],
        run_after=row["run_after"],
        started_at=None,
        finished_at=None,
        deadline=job.deadline,
        last_error=None,
        cancel_requested=False,
        resource_key=None,
        resource_version=None,
        sequence=row["sequence"],
        fencing_token=FencingToken(0),
        idempotency_key=None,
        depends_on=(),
        labels=dict(job.labels),
        parent_job_id=parent,
    )


async def insert_many_ids(conn: Connection, tenant: TenantId, actor: str, items: Sequence[PlainInsert]) -> list[JobId]:
    """As insert_many, answering only the ids (in input order): no row is read back or decoded."""
    job_ids = new_job_ids(len(items))
    cur = await conn.execute(queries.JOB_INSERT_MANY_IDS, _insert_many_params(tenant, actor, job_ids, items))
    if cur.rowcount != len(items):
        raise RuntimeError(f"{len(items)} jobs to insert but {cur.rowcount} inserted")
    return [JobId(str(job_id)) for job_id in job_ids]


async def insert_plain_ids(
    conn: Connection, tenant: TenantId, actor: str, batch: PlainBatch, policies: Mapping[str, KindPolicy]
) -> list[JobId]:
    """As insert_many_ids, from a batch's columns (`policies` holds each of its kinds'): the parameters
    are arrays in the binary format, made whole, not adapted value by value."""
    count = len(batch)
    block = new_job_id_block(count)
    trace = batch.trace_context
    # By kind, then looked up per job with map(): a batch holds few kinds.
    defaults = {kind: policy.max_attempts for kind, policy in policies.items()}
    bases = {kind: policy.backoff_base_seconds for kind, policy in policies.items()}
    caps = {kind: policy.backoff_cap_seconds for kind, policy in policies.items()}
    max_attempts = (
        [given or defaults[kind] for kind, given in zip(batch.kinds, batch.max_attempts, strict=True)]
        if any(batch.max_attempts)
        else list(map(defaults.__getitem__, batch.kinds))
    )
    params = _insert_params(
        tenant,
        actor,
        block,
        kinds=batch.kinds,
        payloads=batch.payloads,
        priorities=batch.priorities,
        run_afters=batch.run_afters,
        deadlines=batch.deadlines,
        max_attempts=max_attempts,
        backoff_bases=list(map(bases.__getitem__, batch.kinds)),
        backoff_caps=list(map(caps.__getitem__, batch.kinds)),
        labels=batch.labels,
        traces=[trace] * count,
    )
    cur = await conn.execute(queries.JOB_INSERT_MANY_IDS, params)
    if cur.rowcount != count:
        raise RuntimeError(f"{count} jobs to insert but {cur.rowcount} inserted")
    return job_ids_from_block(block)


def _insert_many_params(
    tenant: TenantId, actor: str, job_ids: Sequence[uuid.UUID], items: Sequence[PlainInsert]
) -> dict[str, object]:
    jobs = [i.job for i in items]
    return _insert_params(
        tenant,
        actor,
        b"".join(job_id.bytes for job_id in job_ids),
        kinds=[job.kind for job in jobs],
        payloads=[job.payload for job in jobs],
        priorities=[job.priority for job in jobs],
        run_afters=[job.run_after for job in jobs],
        deadlines=[job.deadline for job in jobs],
        max_attempts=[i.max_attempts for i in items],
        backoff_bases=[i.backoff_base_seconds for i in items],
        backoff_caps=[i.backoff_cap_seconds for i in items],
        labels=[job.labels for job in jobs],
        traces=[job.trace_context for job in jobs],
    )


def _insert_params(
    tenant: TenantId,
    actor: str,
    packed_ids: bytes,
    *,
    kinds: Sequence[str],
    payloads: Sequence[bytes],
    priorities: Sequence[int],
    run_afters: Sequence[datetime | None],
    deadlines: Sequence[datetime | None],
    max_attempts: Sequence[int],
    backoff_bases: Sequence[float],
    backoff_caps: Sequence[float],
    labels: Sequence[dict[str, str]],
    traces: Sequence[TraceContext | None],
) -> dict[str, object]:
    """The parameters of the insert statements, one column each, as whole arrays in the binary format:
    psycopg adapting a dozen values a job one by one was a tenth of the API's CPU a submitted job."""
    return {
        "tenant": tenant,
        "actor": actor,
        "parent_job_id": None,
        "job_ids": binary_arrays.uuids(packed_ids),
        "kinds": binary_arrays.texts(kinds),
        "payloads": binary_arrays.byteas(payloads),
        "priorities": binary_arrays.int4s(priorities),
        "run_afters": binary_arrays.timestamptzs(run_afters),
        "deadlines": binary_arrays.timestamptzs(deadlines),
        "max_attempts": binary_arrays.int4s(max_attempts),
        "backoff_bases": binary_arrays.float8s(backoff_bases),
        "backoff_caps": binary_arrays.float8s(backoff_caps),
        "labels": binary_arrays.jsonb_objects(labels),
        "traceparents": binary_arrays.texts([trace.traceparent if trace else None for trace in traces]),
        "tracestates": binary_arrays.texts([trace.tracestate if trace else None for trace in traces]),
    }


async def dependency_states(conn: Connection, tenant: TenantId, job_ids: Sequence[JobId]) -> dict[JobId, JobState]:
    """States of this tenant's named jobs (absent ids are missing), share-locked until commit."""
    cur = await conn.execute(queries.JOB_DEPENDENCY_STATES, {"tenant": tenant, "job_ids": list(job_ids)})
    return {JobId(str(r["job_id"])): JobState(r["state"]) for r in await cur.fetchall()}


async def lock_resource_head_and_tombstone(conn: Connection, tenant: TenantId, resource_key: str) -> tuple[int, int]:
    """The highest version submitted and the highest deleted (0 when none); holds the key's lock until commit."""
    cur = await conn.execute(queries.RESOURCE_HEAD_LOCK, {"tenant": tenant, "resource_key": resource_key})
    row = await _only_row(cur)
    return row["latest_version"], row["deleted_version"]


async def advance_resource(
    conn: Connection, *, tenant: TenantId, resource_key: str, resource_version: int, actor: str
) -> list[JobId]:
    """Makes `resource_version` the latest and supersedes unfinished older jobs; returns those."""
    params = {"tenant": tenant, "resource_key": resource_key, "resource_version": resource_version, "actor": actor}
    await conn.execute(queries.RESOURCE_HEAD_ADVANCE, params)
    cur = await conn.execute(queries.JOB_SUPERSEDE_OLDER, params)
    return [JobId(str(r["job_id"])) for r in await cur.fetchall()]


async def cancel(conn: Connection, *, tenant: TenantId, job_id: JobId, actor: str, reason: str) -> Job | None:
    """None when the job is absent or already finished."""
    cur = await conn.execute(queries.JOB_CANCEL, {"tenant": tenant, "job_id": job_id, "actor": actor, "reason": reason})
    row = await cur.fetchone()
    return job_from_row(row) if row else None


@dataclass(frozen=True)
class RetryCandidate:
    state: JobState
    resource_version: int | None
    latest_version: int | None
    depends_on: tuple[JobId, ...]
    # The latest attempt's external effect may have happened and no retry has accepted that yet.
    duplicate_risk: bool
    # The highest version of the job's resource that was deleted (0 when none was).
    deleted_version: int = 0
    singleton_key: str | None = None


async def lock_for_retry(conn: Connection, tenant: TenantId, job_id: JobId) -> RetryCandidate | None:
    """Locks the job's resource head, then the job, until commit: the order a submission takes them,
    so a retry never reopens a version that a concurrent submission is superseding."""
    params = {"tenant": tenant, "job_id": job_id}
    cur = await conn.execute(queries.RESOURCE_HEAD_LOCK_FOR_RETRY, params)
    head = await cur.fetchone()
    cur = await conn.execute(queries.JOB_LOCK_FOR_RETRY, params)
    row = await cur.fetchone()
    if row is None:
        return None
    return RetryCandidate(
        JobState(row["state"]),
        row["resource_version"],
        head["latest_version"] if head else None,
        tuple(JobId(str(d)) for d in row["depends_on"]),
        row["duplicate_risk"],
        head["deleted_version"] if head else 0,
        row["singleton_key"],
    )


async def reopen(
    conn: Connection,
    *,
    tenant: TenantId,
    job_id: JobId,
    expected: JobState,
    next_state: JobState,
    actor: str,
    reason: str,
    duplicate_risk_accepted: bool = False,
) -> Job | None:
    cur = await conn.execute(
        queries.JOB_RETRY,
        {
            "tenant": tenant,
            "job_id": job_id,
            "expected_state": expected.value,
            "next_state": next_state.value,
            "actor": actor,
            "reason": reason,
            "duplicate_risk_accepted": duplicate_risk_accepted,
        },
    )
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def resource_head_and_tombstone(conn: Connection, tenant: TenantId, resource_key: str) -> tuple[int, int] | None:
    """The highest version submitted and the highest deleted; None when the tenant never submitted one."""
    cur = await conn.execute(queries.RESOURCE_HEAD_GET, {"tenant": tenant, "resource_key": resource_key})
    row = await cur.fetchone()
    return (row["latest_version"], row["deleted_version"]) if row else None


async def result_for_version(
    conn: Connection, tenant: TenantId, resource_key: str, resource_version: int
) -> tuple[Job, JobResult | None] | None:
    """The version's succeeded job and its result, else its newest job and None; None without a job."""
    cur = await conn.execute(
        queries.RESULT_FOR_RESOURCE_VERSION,
        {"tenant": tenant, "resource_key": resource_key, "resource_version": resource_version},
    )
    row = await cur.fetchone()
    if row is None:
        return None
    job = job_from_row(row)
    if row["result_payload"] is None:
        return job, None
    result = JobResult(
        job.job_id,
        bytes(row["result_payload"]),
        row["result_attempt"],
        FencingToken(row["result_fencing_token"]),
        row["result_created_at"],
    )
    return job, result


async def lock_key(conn: Connection, what: str, tenant: TenantId, key: str) -> None:
    """Holds one of the tenant's `sequence`, `singleton` or `debounce` keys until commit."""
    await conn.execute(queries.JOB_KEY_LOCK, {"what": what, "tenant": tenant, "key": key})


async def hold_sequence(conn: Connection, tenant: TenantId, sequence_key: str) -> bool:
    """Whether a job still holds the sequence (the caller holds the sequence's lock); if one does, the first
    such job is share-locked until commit, so that it cannot end unseen by a job about to join."""
    cur = await conn.execute(
        queries.JOB_SEQUENCE_HOLD, {"tenant": tenant, "sequence_key": sequence_key, "job_id": None}
    )
    return bool((await _only_row(cur))["held"])


async def join_sequence(conn: Connection, tenant: TenantId, job_id: JobId, sequence_key: str, *, held: bool) -> None:
    """Puts a just-stored job last in its sequence: waiting when `held` (hold_sequence), its head otherwise."""
    await conn.execute(
        queries.JOB_SEQUENCE_JOIN, {"tenant": tenant, "job_id": job_id, "sequence_key": sequence_key, "held": held}
    )


async def active_singleton(conn: Connection, tenant: TenantId, singleton_key: str) -> Job | None:
    """The tenant's pending, retry-waiting, blocked or running job with this singleton key."""
    cur = await conn.execute(queries.JOB_SINGLETON_ACTIVE, {"tenant": tenant, "singleton_key": singleton_key})
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def collapse_debounced(conn: Connection, tenant: TenantId, new: NewJob) -> Job | None:
    """The tenant's open job of `new`'s debounce key, given `new`'s payload and a new quiet window; None when
    no job of the key is open (pending and never claimed)."""
    assert new.debounce is not None
    cur = await conn.execute(
        queries.JOB_DEBOUNCE_COLLAPSE,
        {
            "tenant": tenant,
            "debounce_key": new.debounce.key,
            "payload": new.payload,
            "quiet_seconds": new.debounce.quiet_seconds,
        },
    )
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def lock_input(conn: Connection, tenant: TenantId, new: NewJob, input_digest: bytes) -> None:
    """Holds, until commit, the lock of one input: identical submissions asking for de-duplication
    decide one after another, so concurrent ones attach to the same job."""
    identity = json.dumps([tenant, new.kind, input_digest.hex(), new.resource_key, new.resource_version])
    # Two different inputs sharing a key only wait for each other, which is harmless.
    lock_key = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big", signed=True)
    await conn.execute(queries.JOB_INPUT_LOCK, {"lock_key": lock_key})


async def find_attachable(
    conn: Connection, tenant: TenantId, new: NewJob, input_digest: bytes, *, window_seconds: float
) -> Job | None:
    """The job an identical submission attaches to (docs/API.md, de-duplication by input), if any."""
    cur = await conn.execute(
        queries.JOB_FIND_ATTACHABLE,
        {
            "tenant": tenant,
            "kind": new.kind,
            "input_digest": input_digest,
            "resource_key": new.resource_key,
            "resource_version": new.resource_version,
            "window_seconds": window_seconds,
        },
    )
    row = await cur.fetchone()
    return job_from_row(row) if row else None


async def list_events(
    conn: Connection, tenant: TenantId, job_id: JobId, *, after_sequence: int, limit: int
) -> list[JobEvent]:
    cur = await conn.execute(
        queries.EVENT_LIST,
        {"tenant": tenant, "job_id": job_id, "after_sequence": after_sequence, "limit": limit},
    )
    return [
        JobEvent(
            job_id=JobId(str(r["job_id"])),
            sequence=r["sequence"],
            from_state=JobState(r["from_state"]) if r["from_state"] else None,
            to_state=JobState(r["to_state"]),
            attempt=r["attempt"],
            fencing_token=FencingToken(r["fencing_token"]),
            actor=r["actor"],
            reason=r["reason"],
            at=r["at"],
            error=JobError(ErrorCategory(r["error_category"]), r["error_message"], r["error_traceback"])
            if r["error_category"]
            else None,
        )
        for r in await cur.fetchall()
    ]


async def record_attempt_error(conn: Connection, lease: LeaseRef, error: JobError) -> None:
    """Keeps the error of the attempt that `lease` held, beside the job's history."""
    await conn.execute(
        queries.ATTEMPT_ERROR_RECORD,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "category": error.category.value,
            "message": error.message,
            "traceback": error.traceback,
        },
    )


async def get_by_idempotency_key(conn: Connection, tenant: TenantId, key: str) -> tuple[Job, bytes | None] | None:
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
    """A page of the tenant's jobs, newest first; with `filters.sequence_key`, the jobs still holding that
    sequence in its order (head first), with the cursor's sequence_place after the page's last."""
    if filters.sequence_key is not None:
        rows = await _sequence_rows(conn, tenant, filters, after.sequence_place if after else None, page_size + 1)
        page = job_page([job_from_row(row) for row in rows], page_size)
        if page.next_cursor is None:
            return page
        last = rows[len(page.jobs) - 1]
        return JobPage(
            page.jobs, replace(page.next_cursor, sequence_place=(last["waiting"], last["sequence_position"]))
        )
    cur = await conn.execute(
        queries.JOB_LIST_CHILDREN if filters.parent_job_id else queries.JOB_LIST,
        {
            "tenant": tenant,
            "parent_job_id": filters.parent_job_id,
            **_list_filter_params(filters),
            "after_created_at": after.created_at if after else None,
            "after_job_id": after.job_id if after else None,
            "limit": page_size + 1,
        },
    )
    return job_page([job_from_row(row) for row in await cur.fetchall()], page_size)


async def sequence_rows(conn: Connection, tenant: TenantId, sequence_key: str, *, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` of the jobs still holding one tenant's sequence, its head first (as job rows)."""
    return await _sequence_rows(conn, tenant, ListFilter(sequence_key=sequence_key), None, limit)


async def _sequence_rows(
    conn: Connection, tenant: TenantId, filters: ListFilter, after: tuple[bool, int] | None, limit: int
) -> list[dict[str, Any]]:
    cur = await conn.execute(
        queries.JOB_LIST_SEQUENCE,
        {
            "tenant": tenant,
            "sequence_key": filters.sequence_key,
            **_list_filter_params(filters),
            "after_waiting": after[0] if after else None,
            "after_position": after[1] if after else None,
            "limit": limit,
        },
    )
    return list(await cur.fetchall())


def _list_filter_params(filters: ListFilter) -> dict[str, Any]:
    return {
        "states": [s.value for s in filters.states],
        "kind": filters.kind,
        "resource_key": filters.resource_key,
        "labels": Jsonb(filters.labels),
    }


async def get_result(conn: Connection, tenant: TenantId, job_id: JobId) -> tuple[JobState, JobResult | None] | None:
    """None when the job does not exist for this tenant; otherwise its state and result, if any."""
    found = await get_result_and_resource(conn, tenant, job_id)
    return (found[0], found[1]) if found else None


async def get_result_and_resource(
    conn: Connection, tenant: TenantId, job_id: JobId
) -> tuple[JobState, JobResult | None, str | None, int | None] | None:
    """As get_result, with the job's resource key and version (None without a resource)."""
    cur = await conn.execute(queries.RESULT_GET, {"tenant": tenant, "job_id": job_id})
    row = await cur.fetchone()
    if row is None:
        return None
    resource = (row["resource_key"], row["resource_version"])
    if row["payload"] is None:
        return JobState(row["state"]), None, *resource
    result = JobResult(
        job_id=JobId(str(row["job_id"])),
        payload=bytes(row["payload"]),
        attempt=row["attempt"],
        fencing_token=FencingToken(row["fencing_token"]),
        created_at=row["created_at"],
    )
    return JobState(row["state"]), result, *resource


async def count_queued(conn: Connection, tenant: TenantId, *, up_to: int) -> int:
    """The tenant's jobs waiting to run, counted up to `up_to` at most."""
    cur = await conn.execute(queries.JOB_COUNT_QUEUED, {"tenant": tenant, "up_to": up_to})
    queued: int = (await _only_row(cur))["queued"]
    return queued


async def _only_row(cur: AsyncCursor[DictRow]) -> DictRow:
    """The row of a statement that always returns exactly one (an aggregate, an upsert's RETURNING):
    none is a bug, reported as one rather than as a TypeError on None."""
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("a statement that always returns one row returned none")
    return row
