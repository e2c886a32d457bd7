"""Submitting jobs: validation, defaults per kind, idempotency. Answers only after COMMIT."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.errors import AlreadyExists, InvalidArgument, FieldViolation, Unavailable
from shared.domain.idempotency import request_digest
from shared.domain.ids import TenantId
from shared.domain.jobs import NewJob, SubmitOutcome
from shared.domain.submission_rules import SubmissionLimits, validate_new_job
from shared.handlers.api import HandlerRegistry
from shared.storage import job_store
from shared.storage.database import Connection, Database


class SubmissionService:
    def __init__(self, db: Database, registry: HandlerRegistry, limits: SubmissionLimits) -> None:
        self._db = db
        self._registry = registry
        self._limits = limits

    async def submit(self, tenant: TenantId, actor: str, job: NewJob) -> SubmitOutcome:
        validate_new_job(job, limits=self._limits, known_kinds=self._registry.kinds())
        async with self._db.transaction() as conn:
            return await self._submit_one(conn, tenant, actor, job)

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
            return [await self._submit_one(conn, tenant, actor, job) for job in jobs]

    async def _submit_one(self, conn: Connection, tenant: TenantId, actor: str, job: NewJob) -> SubmitOutcome:
        spec = self._registry.get(job.kind)
        assert spec is not None  # validation admitted only registered kinds
        digest = request_digest(job) if job.idempotency_key is not None else None
        params = job_store.InsertParams(
            tenant=tenant,
            actor=actor,
            max_attempts=job.max_attempts or spec.max_attempts,
            backoff_base_seconds=spec.backoff_base_seconds,
            backoff_cap_seconds=spec.backoff_cap_seconds,
            request_digest=digest,
        )
        created = await job_store.insert_job(conn, job, params)
        if created is not None:
            return SubmitOutcome(created, True)
        assert job.idempotency_key is not None  # only a key conflict inserts nothing
        existing = await job_store.get_by_idempotency_key(conn, tenant, job.idempotency_key)
        if existing is None:
            # The conflicting row vanished between the two statements (retention ran): let the caller retry.
            raise Unavailable("the idempotency key is being reused concurrently; try again")
        existing_job, existing_digest = existing
        if existing_digest != digest:
            raise AlreadyExists(
                "the idempotency key was used for a different request",
                metadata={"job_id": existing_job.job_id},
            )
        return SubmitOutcome(existing_job, False)
