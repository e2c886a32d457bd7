"""Submitting jobs: validation, defaults per kind, idempotency, versions and dependencies.
Answers only after COMMIT."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.errors import AlreadyExists, FieldViolation, InvalidArgument, Unavailable
from shared.domain.idempotency import request_digest
from shared.domain.ids import TenantId
from shared.domain.jobs import ErrorCategory, Job, JobError, JobState, NewJob, SubmitOutcome
from shared.domain.submission_rules import SubmissionLimits, validate_new_job
from shared.handlers.api import HandlerRegistry
from shared.storage import job_store
from shared.storage.database import Connection, Database

_ENDED_BADLY = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED})


class SubmissionService:
    def __init__(self, db: Database, registry: HandlerRegistry, limits: SubmissionLimits) -> None:
        self._db = db
        self._registry = registry
        self._limits = limits

    async def submit(self, tenant: TenantId, actor: str, job: NewJob) -> SubmitOutcome:
        validate_new_job(job, limits=self._limits, known_kinds=self._registry.kinds())
        async with self._db.transaction() as conn:
            return await self._submit_one(conn, tenant, actor, job, "")

    async def submit_many(self, tenant: TenantId, actor: str, jobs: Sequence[NewJob]) -> list[SubmitOutcome]:
        """All or nothing: any invalid item or reused key rejects the batch and writes nothing."""
        if not jobs:
            raise InvalidArgument(FieldViolation("jobs", "must hold at least one submission"))
        if len(jobs) > self._limits.max_batch_size:
            raise InvalidArgument(FieldViolation("jobs", f"must hold at most {self._limits.max_batch_size}"))
        for index, job in enumerate(jobs):
            validate_new_job(
                job, limits=self._limits, known_kinds=self._registry.kinds(), prefix=f"jobs[{index}]."
            )
        async with self._db.transaction() as conn:
            return [
                await self._submit_one(conn, tenant, actor, job, f"jobs[{index}].")
                for index, job in enumerate(jobs)
            ]

    async def _submit_one(
        self, conn: Connection, tenant: TenantId, actor: str, job: NewJob, prefix: str
    ) -> SubmitOutcome:
        digest = request_digest(job) if job.idempotency_key is not None else None
        if job.idempotency_key is not None:
            existing = await job_store.get_by_idempotency_key(conn, tenant, job.idempotency_key)
            if existing is not None:
                return _replay(*existing, digest)
        spec = self._registry.get(job.kind)
        assert spec is not None  # validation admitted only registered kinds
        state, error, reason = JobState.PENDING, None, "submitted"
        latest_version = 0
        if job.resource_key:
            latest_version = await job_store.lock_resource_head(conn, tenant, job.resource_key)
            if (job.resource_version or 0) < latest_version:
                state, reason = JobState.SUPERSEDED, f"version {latest_version} was already submitted"
        if state is JobState.PENDING and job.depends_on:
            state, error = await _dependency_state(conn, tenant, job, prefix)
            reason = error.message if error else reason
        params = job_store.InsertParams(
            tenant=tenant,
            actor=actor,
            max_attempts=job.max_attempts or spec.max_attempts,
            backoff_base_seconds=spec.backoff_base_seconds,
            backoff_cap_seconds=spec.backoff_cap_seconds,
            request_digest=digest,
            state=state,
            error=error,
            reason=reason,
        )
        created = await job_store.insert_job(conn, job, params)
        if created is None:
            # A concurrent submission with the same key committed first.
            assert job.idempotency_key is not None
            existing = await job_store.get_by_idempotency_key(conn, tenant, job.idempotency_key)
            if existing is None:
                raise Unavailable("the idempotency key is being reused concurrently; try again")
            return _replay(*existing, digest)
        if job.resource_key and (job.resource_version or 0) > latest_version:
            await job_store.advance_resource(
                conn, tenant=tenant, resource_key=job.resource_key,
                resource_version=job.resource_version or 0, actor=actor,
            )
        return SubmitOutcome(created, True)


def _replay(existing: Job, existing_digest: bytes | None, digest: bytes | None) -> SubmitOutcome:
    if existing_digest != digest:
        raise AlreadyExists(
            "the idempotency key was used for a different request", metadata={"job_id": existing.job_id}
        )
    return SubmitOutcome(existing, False)


async def _dependency_state(
    conn: Connection, tenant: TenantId, job: NewJob, prefix: str
) -> tuple[JobState, JobError | None]:
    """PENDING when every dependency succeeded, FAILED when one ended otherwise, else BLOCKED.
    Dependencies must exist already, so no cycle can ever form."""
    states = await job_store.dependency_states(conn, tenant, job.depends_on)
    missing = [
        FieldViolation(f"{prefix}depends_on[{i}]", "no such job")
        for i, dep in enumerate(job.depends_on) if dep not in states
    ]
    if missing:
        raise InvalidArgument(missing)
    for dep in job.depends_on:
        if states[dep] in _ENDED_BADLY:
            return JobState.FAILED, JobError(ErrorCategory.PERMANENT, f"dependency {dep} ended {states[dep].value}")
    if all(states[dep] is JobState.SUCCEEDED for dep in job.depends_on):
        return JobState.PENDING, None
    return JobState.BLOCKED, None
