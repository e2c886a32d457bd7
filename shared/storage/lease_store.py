"""A worker's leases: claims, heartbeats, fenced reports and the sweeps that end expired leases."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncCursor
from psycopg.pq import ExecStatus
from psycopg.rows import RowMaker, no_result, tuple_row

from shared.domain.errors import RowsRejected
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import (
    ClaimedJob,
    Completion,
    CompletionBatch,
    FailOutcome,
    JobError,
    JobState,
    LeaseRef,
    LeaseStatus,
    ReportOutcome,
    RetryHint,
    refusal_outcome,
)
from shared.domain.trace_context import TraceContext
from shared.storage import binary_arrays, queries
from shared.storage.database import Connection, Database, savepoint
from shared.storage.refusals import refusal, refusals


@dataclass(frozen=True)
class Transition:
    """A job that a sweep moved to a new state."""

    job_id: JobId
    tenant: TenantId
    kind: str
    state: JobState
    attempts: int
    fencing_token: FencingToken


async def claim_batch(
    conn: Connection, *, worker_id: str, kinds: Sequence[str], limit: int, lease_seconds: float
) -> list[ClaimedJob]:
    """The claim inside the caller's transaction (tests, and callers that do more in it)."""
    cur = conn.cursor(binary=True, row_factory=_claimed_job)
    await cur.execute(queries.JOB_CLAIM_BATCH, _claim_params(worker_id, kinds, limit, lease_seconds))
    return await cur.fetchall()


async def claim_batch_alone(
    db: Database, *, worker_id: str, kinds: Sequence[str], limit: int, lease_seconds: float
) -> list[ClaimedJob]:
    """The claim in a transaction of its own, in one round trip (`Database.run_alone`); what it returns
    is committed. One statement does the whole claim (routines/claim.sql), so nothing else belongs in
    its transaction."""
    params = _claim_params(worker_id, kinds, limit, lease_seconds)
    # Binary: its timestamps and payloads are decoded with no text to parse, on both ends of the connection.
    return await db.run_alone_as(_claimed_job, queries.JOB_CLAIM_BATCH, params, binary=True)


def _claim_params(worker_id: str, kinds: Sequence[str], limit: int, lease_seconds: float) -> dict[str, Any]:
    return {"worker_id": worker_id, "kinds": list(kinds), "limit": limit, "lease_seconds": lease_seconds}


# As the result names them, in bytes: read from the result itself, not its description (an object per
# column, made anew at each reading).
_CLAIMED_COLUMNS = (
    b"job_id",
    b"tenant",
    b"kind",
    b"payload",
    b"attempts",
    b"max_attempts",
    b"fencing_token",
    b"lease_expires_at",
    b"created_at",
    b"queued_since",
    b"claimed_at",
    b"traceparent",
    b"tracestate",
)


def _claimed_job(cursor: AsyncCursor[Any]) -> RowMaker[ClaimedJob]:
    """Makes each claimed row into its ClaimedJob straight from the row's values (a worker's most
    numerous rows: a dict per row first was a tenth of a claim's CPU), its columns found by name."""
    result = cursor.pgresult
    if result is None or result.status != ExecStatus.TUPLES_OK:
        return no_result
    names = [result.fname(number) for number in range(result.nfields)]
    in_order = operator.itemgetter(*(names.index(name) for name in _CLAIMED_COLUMNS))

    def claimed_job(values: Sequence[Any]) -> ClaimedJob:
        (job_id, tenant, kind, payload, attempts, max_attempts, token, expires, created, queued, claimed,
         traceparent, tracestate) = in_order(values)  # fmt: skip
        trace = TraceContext(traceparent, tracestate) if traceparent else None
        return ClaimedJob(
            job_id,
            tenant,
            kind,
            bytes(payload),
            attempts,
            max_attempts,
            token,
            expires,
            created,
            queued,
            claimed,
            trace,
        )

    return claimed_job


def _transitions(rows: list[dict[str, Any]]) -> list[Transition]:
    return [
        Transition(
            JobId(str(r["job_id"])),
            TenantId(r["tenant"]),
            r["kind"],
            JobState(r["state"]),
            r["attempts"],
            FencingToken(r["fencing_token"]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class RejectedRow:
    """A job whose sweep statement the database refused; the sweep moved on without it."""

    job_id: JobId
    error: str


@dataclass(frozen=True)
class SweepPass:
    """What one pass of a sweep did: the jobs it moved, and the ones it had to leave as they were."""

    moved: list[Transition]
    rejected: list[RejectedRow]


async def rescue_expired_leases(conn: Connection, *, limit: int, passed_over: Sequence[JobId] = ()) -> SweepPass:
    """Ends up to `limit` expired leases, skipping `passed_over`; a row the database refuses to move is
    left as it was and reported, and never stops the others."""
    return await _sweep(conn, queries.JOB_LOCK_EXPIRED_LEASES, queries.JOB_RESCUE_EXPIRED, limit, passed_over)


async def fail_past_deadline(conn: Connection, *, limit: int, passed_over: Sequence[JobId] = ()) -> SweepPass:
    """Fails up to `limit` waiting jobs past their deadline, skipping `passed_over`; rejected rows as above."""
    return await _sweep(conn, queries.JOB_LOCK_PAST_DEADLINE, queries.JOB_FAIL_PAST_DEADLINE, limit, passed_over)


async def _sweep(conn: Connection, lock: str, move: str, limit: int, passed_over: Sequence[JobId]) -> SweepPass:
    cur = await conn.execute(lock, {"limit": limit, "passed_over": list(passed_over)})
    job_ids = [JobId(str(r["job_id"])) for r in await cur.fetchall()]
    moved: list[Transition] = []
    rejected: list[RejectedRow] = []
    if job_ids:
        await _move_isolating(conn, move, job_ids, moved, rejected)
    return SweepPass(moved, rejected)


async def _move_isolating(
    conn: Connection, move: str, job_ids: list[JobId], moved: list[Transition], rejected: list[RejectedRow]
) -> None:
    """Moves the locked rows in one statement; when the database refuses it, halves the batch until the
    refused rows stand alone, so that one bad row costs about 2·log2(batch) statements, not the batch."""
    try:
        async with savepoint(conn):
            cur = await conn.execute(move, {"job_ids": job_ids})
            rows = await cur.fetchall()
    except RowsRejected as exc:
        if len(job_ids) == 1:
            rejected.append(RejectedRow(job_ids[0], exc.message))
            return
        half = len(job_ids) // 2
        await _move_isolating(conn, move, job_ids[:half], moved, rejected)
        await _move_isolating(conn, move, job_ids[half:], moved, rejected)
        return
    moved.extend(_transitions(rows))


async def heartbeat(conn: Connection, leases: Sequence[LeaseRef], *, lease_seconds: float) -> list[LeaseStatus]:
    """Extends held leases; for the others says whether the job was cancelled or superseded, and the
    refusal (the outcome) any report under that lease would get."""
    cur = await conn.execute(
        queries.JOB_HEARTBEAT_BATCH,
        {
            "job_ids": [lease.job_id for lease in leases],
            "fencing_tokens": [lease.fencing_token for lease in leases],
            "lease_seconds": lease_seconds,
        },
    )
    held = {(r["job_id"], r["fencing_token"]): r for r in await cur.fetchall()}
    lost = [lease.job_id for lease in leases if (lease.job_id, lease.fencing_token) not in held]
    current: dict[str, Any] = {}
    if lost:
        diagnosed = await conn.execute(queries.JOB_LEASE_DIAGNOSE, {"job_ids": lost})
        current = {str(r["job_id"]): r for r in await diagnosed.fetchall()}
    statuses = []
    for lease in leases:
        row = held.get((lease.job_id, lease.fencing_token))
        now = current.get(lease.job_id)
        state = JobState(now["state"]) if now else None
        statuses.append(
            LeaseStatus(
                job_id=lease.job_id,
                fencing_token=lease.fencing_token,
                held=row is not None,
                cancel_requested=bool(row and row["cancel_requested"]) or state is JobState.CANCELLED,
                superseded=state is JobState.SUPERSEDED,
                lease_expires_at=row["lease_expires_at"] if row else None,
                resource_deleted=bool(row is None and now and now["resource_deleted"]),
                outcome=(
                    ReportOutcome.ACCEPTED
                    if row is not None
                    else refusal_outcome(state, resource_deleted=bool(now and now["resource_deleted"]))
                ),
                # Only the holder's own completion can make it SUCCEEDED under this token: a heartbeat
                # that raced it. (A failure under the same token may also be the lease sweep's.)
                ended_by_holder=(
                    now is not None and state is JobState.SUCCEEDED and now["fencing_token"] == lease.fencing_token
                ),
            )
        )
    return statuses


async def complete_batch(conn: Connection, *, worker_id: str, completions: Sequence[Completion]) -> list[ReportOutcome]:
    """One fenced statement for the whole batch (job ids checked with is_job_id); outcomes in input order."""
    outcomes, _ = await _complete(conn, worker_id, CompletionBatch.of(completions))
    return outcomes


async def complete_alone(db: Database, *, worker_id: str, batch: CompletionBatch) -> list[ReportOutcome]:
    """As complete_batch, for completions given as columns (their job ids checked with is_job_id), the
    statement in a transaction of its own (Database.run_alone: one round trip). The refused ones, if any,
    are diagnosed after its COMMIT."""
    rows = await db.run_alone_tuples(queries.JOB_COMPLETE_BATCH, _complete_params(worker_id, batch))
    finished = _finished(rows)
    if len(finished) == len(batch):  # every one completed: the job ids are distinct
        return _outcomes(batch, finished, {})
    async with db.transaction() as conn:
        return _outcomes(batch, finished, await _refused_why(conn, batch, finished))


async def complete_parent(conn: Connection, *, worker_id: str, completion: Completion) -> TenantId | ReportOutcome:
    """The fenced completion of a job that spawned children: its tenant when it SUCCEEDED (the children
    go in this transaction, in that tenant), else why it was refused."""
    (outcome,), tenants = await _complete(conn, worker_id, CompletionBatch.of([completion]))
    return tenants[completion.job_id] if outcome is ReportOutcome.ACCEPTED else outcome


async def _complete(
    conn: Connection, worker_id: str, batch: CompletionBatch
) -> tuple[list[ReportOutcome], dict[JobId, TenantId]]:
    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(queries.JOB_COMPLETE_BATCH, _complete_params(worker_id, batch))
    rows = await cur.fetchall()
    finished = _finished(rows)
    tenants = {JobId(job_id): TenantId(tenant) for job_id, _, tenant, _, _ in rows}
    return _outcomes(batch, finished, await _refused_why(conn, batch, finished)), tenants


def _complete_params(worker_id: str, batch: CompletionBatch) -> dict[str, object]:
    """Arrays in the binary format, made whole (binary_arrays): a batch of completions is the API's most
    frequent statement."""
    # Job ids are 36 characters of hex and hyphens (is_job_id): the hex of them all is the uuid[]'s bytes.
    packed_ids = bytes.fromhex("".join(batch.job_ids).replace("-", ""))
    return {
        "job_ids": binary_arrays.uuids(packed_ids),
        "fencing_tokens": binary_arrays.int8s(batch.fencing_tokens),
        "results": binary_arrays.byteas(batch.results),
        "worker_id": worker_id,
    }


def _finished(rows: Sequence[tuple[Any, ...]]) -> dict[tuple[str, int], str]:
    """The state each completed (job id, fencing token) is in, from the statement's rows (as tuples: job_id,
    state, tenant, attempts, fencing_token)."""
    return {(job_id, token): state for job_id, state, _, _, token in rows}


async def _refused_why(
    conn: Connection, batch: CompletionBatch, finished: dict[tuple[str, int], str]
) -> dict[JobId, ReportOutcome]:
    pairs = zip(batch.job_ids, batch.fencing_tokens, strict=True)
    return await refusals(conn, [job_id for job_id, token in pairs if (job_id, token) not in finished])


def _outcomes(
    batch: CompletionBatch, finished: dict[tuple[str, int], str], refused_why: dict[JobId, ReportOutcome]
) -> list[ReportOutcome]:
    """In input order: what each completed job's state answers, else why it was refused."""
    states = map(finished.get, zip(batch.job_ids, batch.fencing_tokens, strict=True))
    if not refused_why:
        return list(map(_COMPLETED.__getitem__, states))  # type: ignore[arg-type]  # each pair is in finished
    return [
        _COMPLETED[state] if state is not None else refused_why[job_id]
        for job_id, state in zip(batch.job_ids, states, strict=True)
    ]


# The states a completion leaves its job in, as the statement returns them, and what each answers.
_COMPLETED = {JobState.SUCCEEDED.value: ReportOutcome.ACCEPTED, JobState.CANCELLED.value: ReportOutcome.JOB_CANCELLED}


async def fail_attempt(
    conn: Connection, *, worker_id: str, lease: LeaseRef, error: JobError, retry_after_seconds: float | None = None
) -> FailOutcome | ReportOutcome:
    """The job's next state, or the refusal when the lease is no longer held. `retry_after_seconds`,
    when given, replaces the computed backoff."""
    cur = await conn.execute(
        queries.JOB_FAIL,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "category": error.category.value,
            "message": error.message,
            "worker_id": worker_id,
            "retry_after_seconds": retry_after_seconds,
        },
    )
    return await _fail_outcome(conn, lease, await cur.fetchone())


async def push_back(
    conn: Connection, *, worker_id: str, lease: LeaseRef, hint: RetryHint, message: str, uncounted_max: int
) -> FailOutcome | ReportOutcome:
    """Ends a pushed-back attempt (uncounted while the job has pushbacks to spare); the refusal when the
    lease is no longer held."""
    cur = await conn.execute(
        queries.JOB_PUSH_BACK,
        {
            "job_id": lease.job_id,
            "fencing_token": lease.fencing_token,
            "retry_after_seconds": hint.after_seconds,
            "limit_key": hint.limit_key,
            "message": message,
            "uncounted_max": uncounted_max,
            "worker_id": worker_id,
        },
    )
    return await _fail_outcome(conn, lease, await cur.fetchone())


async def _fail_outcome(conn: Connection, lease: LeaseRef, row: dict[str, Any] | None) -> FailOutcome | ReportOutcome:
    if row is None:
        return await refusal(conn, lease.job_id)
    state = JobState(row["state"])
    waiting = state in (JobState.RETRY_WAIT, JobState.PENDING)
    next_at: datetime | None = row["run_after"] if waiting else None
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
        return await refusal(conn, lease.job_id)
    return JobState(row["state"])
