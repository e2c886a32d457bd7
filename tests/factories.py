"""Row factories: jobs inserted, claimed and moved through their lease by the real storage functions.

Defaults make a retry runnable at once (no backoff), so tests that re-claim never wait on a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import sql

from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.submission import SubmissionService
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import TERMINAL_STATES, ClaimedJob, Job, JobState, NewJob
from shared.domain.submission_rules import SubmissionLimits
from shared.handlers.api import HandlerRegistry
from shared.handlers.loader import load_registry
from shared.storage import job_store, kind_store, lease_store
from shared.storage.database import Database

TENANT_DEFAULT = TenantId("tenant-a")
ACTOR_DEFAULT = f"tenant:{TENANT_DEFAULT}"
KIND_DEFAULT = "echo"
WORKER_ID_DEFAULT = "worker-1"
LEASE_SECONDS_DEFAULT = 30.0
MAX_ATTEMPTS_DEFAULT = 3


def new_job(**fields: Any) -> NewJob:
    """A valid submission of the built-in `echo` kind; any NewJob field can be overridden."""
    fields.setdefault("kind", KIND_DEFAULT)
    fields.setdefault("payload", b"payload")
    return NewJob(**fields)


def insert_params(
    *,
    tenant: TenantId = TENANT_DEFAULT,
    max_attempts: int = MAX_ATTEMPTS_DEFAULT,
    backoff_base_seconds: float = 0.0,
    backoff_cap_seconds: float = 0.0,
    request_digest: bytes | None = None,
) -> job_store.InsertParams:
    return job_store.InsertParams(
        tenant=tenant,
        actor=f"tenant:{tenant}",
        max_attempts=max_attempts,
        backoff_base_seconds=backoff_base_seconds,
        backoff_cap_seconds=backoff_cap_seconds,
        request_digest=request_digest,
    )


async def insert_job(db: Database, **options: Any) -> Job:
    """Inserts one pending job; takes insert_jobs' options and any NewJob field as an override."""
    (job,) = await insert_jobs(db, 1, **options)
    return job


async def insert_jobs(
    db: Database,
    count: int,
    *,
    tenant: TenantId = TENANT_DEFAULT,
    max_attempts: int = MAX_ATTEMPTS_DEFAULT,
    backoff_base_seconds: float = 0.0,
    backoff_cap_seconds: float = 0.0,
    **fields: Any,
) -> list[Job]:
    """Inserts `count` identical pending jobs in one transaction."""
    params = insert_params(
        tenant=tenant,
        max_attempts=max_attempts,
        backoff_base_seconds=backoff_base_seconds,
        backoff_cap_seconds=backoff_cap_seconds,
    )
    jobs = []
    async with db.transaction() as conn:
        for _ in range(count):
            job = await job_store.insert_job(conn, new_job(**fields), params)
            assert job is not None, "an idempotency key conflicted; factories insert fresh jobs only"
            jobs.append(job)
    return jobs


async def claim(
    db: Database,
    *,
    kinds: Sequence[str] = (KIND_DEFAULT,),
    limit: int = 1,
    worker_id: str = WORKER_ID_DEFAULT,
    lease_seconds: float = LEASE_SECONDS_DEFAULT,
) -> list[ClaimedJob]:
    async with db.transaction() as conn:
        return await lease_store.claim_batch(
            conn, worker_id=worker_id, kinds=kinds, limit=limit, lease_seconds=lease_seconds
        )


async def claim_one(db: Database, **options: Any) -> ClaimedJob:
    """Claims the next runnable job; fails the test when none was runnable."""
    claimed = await claim(db, limit=1, **options)
    assert claimed, "expected a runnable job"
    return claimed[0]


async def expire_lease(db: Database, job_id: JobId) -> None:
    """Moves the lease's end into the past, as if the worker had stopped heartbeating."""
    async with db.transaction() as conn:
        cur = await conn.execute(
            "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1 second'"
            " WHERE job_id = %s AND state = 'running'",
            (job_id,),
        )
        assert cur.rowcount == 1, "only a running job has a lease to expire"


async def rescue_expired(db: Database, *, limit: int = 100) -> list[lease_store.Transition]:
    async with db.transaction() as conn:
        return (await lease_store.rescue_expired_leases(conn, limit=limit)).moved


async def reclaim(db: Database, job_id: JobId, **options: Any) -> ClaimedJob:
    """Lets the current lease expire, rescues the job and claims it again under a new token."""
    await expire_lease(db, job_id)
    rescued = await rescue_expired(db)
    assert [t.job_id for t in rescued] == [job_id]
    claimed = await claim_one(db, **options)
    assert claimed.job_id == job_id
    return claimed


async def insert_and_claim(db: Database, *, lease_seconds: float = LEASE_SECONDS_DEFAULT, **options: Any) -> ClaimedJob:
    """Inserts a job (insert_job's options) and claims it: running under its first lease, token 1."""
    job = await insert_job(db, **options)
    claimed = await claim_one(db, kinds=(job.kind,), lease_seconds=lease_seconds)
    assert claimed.job_id == job.job_id, "another runnable job of the same kind was claimed"
    return claimed


async def set_state(db: Database, job_id: JobId, state: JobState, **columns: Any) -> None:
    """Puts a job into `state` directly, for states that no storage function reaches yet
    (cancelled, superseded). A terminal state drops the lease and stamps finished_at."""
    assignments: list[sql.Composable] = [
        sql.SQL("state = %(state)s::job_state, transition_actor = 'test', transition_reason = 'arranged'")
    ]
    if state in TERMINAL_STATES:
        assignments.append(sql.SQL("finished_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL"))
    assignments += [sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in columns]
    statement = sql.SQL("UPDATE jobs SET {} WHERE job_id = %(job_id)s").format(sql.SQL(", ").join(assignments))
    async with db.transaction() as conn:
        cur = await conn.execute(statement, {"state": state, "job_id": job_id, **columns})
        assert cur.rowcount == 1


async def published_kinds(db: Database, registry: HandlerRegistry | None = None) -> KindCatalog:
    """The API's view of the job kinds, after a worker running `registry` (the built-in kinds when
    None) published them, as a replica does before its first claim."""
    registry = registry or load_registry(())
    async with db.transaction() as conn:
        await kind_store.publish(conn, WORKER_ID_DEFAULT, datetime.now(UTC), [s.policy for s in registry.specs()])
    return KindCatalog(db)


async def submission_service(db: Database) -> SubmissionService:
    """The submission use-case over `db`, with the built-in kinds published."""
    return SubmissionService(db, await published_kinds(db), SubmissionLimits())


def set_limit(sync_db: Any, key: str, *, max_running: int = 0, rate_per_second: float = 0.0, burst: int = 1) -> None:
    """An operator's limit on `key`, written straight into job_limits."""
    sync_db.execute(
        "INSERT INTO job_limits (key, max_running, rate_per_second, burst, updated_by)"
        " VALUES (%(key)s, %(max_running)s, %(rate)s, %(burst)s, 'test')"
        " ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running,"
        " rate_per_second = EXCLUDED.rate_per_second, burst = EXCLUDED.burst",
        {"key": key, "max_running": max_running, "rate": rate_per_second, "burst": burst},
    )


def set_weight(sync_db: Any, tenant: str, weight: int) -> None:
    sync_db.execute(
        "INSERT INTO tenant_weights (tenant, weight, updated_by) VALUES (%s, %s, 'test')"
        " ON CONFLICT (tenant) DO UPDATE SET weight = EXCLUDED.weight",
        (tenant, weight),
    )


def pause_kind(sync_db: Any, kind: str) -> None:
    sync_db.execute("INSERT INTO kind_pauses (kind, paused_by) VALUES (%s, 'test')", (kind,))


def declare_kind_keys(sync_db: Any, kind: str, keys: Sequence[str]) -> None:
    """The keys a kind declares, as a worker publishing it would leave them in job_kinds."""
    sync_db.execute(
        "INSERT INTO job_kinds (kind, max_attempts, backoff_base_seconds, backoff_cap_seconds,"
        " external_side_effects, limit_keys, executor, policy_digest, published_by, publisher_started_at)"
        " VALUES (%(kind)s, 3, 0, 0, false, %(keys)s, 'async', '\\x00', 'test', clock_timestamp())"
        " ON CONFLICT (kind) DO UPDATE SET limit_keys = EXCLUDED.limit_keys",
        {"kind": kind, "keys": list(keys)},
    )


def add_own_keys(sync_db: Any, job_id: JobId, keys: Sequence[str], bounds: Sequence[int]) -> None:
    """Keys a submission added (already scoped), with their own bounds."""
    sync_db.execute(
        "UPDATE jobs SET limit_keys = %s, limit_key_bounds = %s WHERE job_id = %s",
        (list(keys), list(bounds), job_id),
    )
