"""A tenant's decisions about a job: cancel it, or run it again."""

from __future__ import annotations

import logging

from shared.domain.errors import FailedPrecondition, NotFound, ResourceDeleted, ViolationCollector
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Job, JobState
from shared.domain.submission_rules import check_job_id, check_text
from shared.json_logging import job_fields
from shared.storage import checkpoint_store, job_store
from shared.storage.database import Connection, Database

log = logging.getLogger(__name__)
REASON_MAX_CHARS = 500
_RETRYABLE_STATES = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.OUTCOME_UNKNOWN})
_ENDED_BADLY = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED})


def _check_reason(reason: str) -> None:
    violations = ViolationCollector()
    check_text(violations, "reason", reason, REASON_MAX_CHARS)
    violations.raise_if_any()


class JobLifecycle:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def cancel(self, tenant: TenantId, actor: str, job_id: JobId, reason: str) -> Job:
        """Waiting jobs end CANCELLED at once; a running one gets cancel_requested and ends CANCELLED
        when its worker stops (or its lease expires)."""
        check_job_id(job_id)
        _check_reason(reason)
        async with self._db.transaction(tenant) as conn:
            job = await cancel_in(conn, tenant, actor, job_id, reason)
        log.info(
            "cancel requested" if job.state is JobState.RUNNING else "job cancelled",
            extra=job_fields(job, actor=actor, reason=reason),
        )
        return job

    async def retry(
        self,
        tenant: TenantId,
        actor: str,
        job_id: JobId,
        reason: str,
        *,
        accept_duplicate_risk: bool,
        clear_checkpoints: bool = False,
    ) -> Job:
        """Reopens a FAILED, CANCELLED or OUTCOME_UNKNOWN job with a fresh attempt budget, recording
        who and why. The fencing token keeps rising: the next claim gets a token never used before.
        Consent to a duplicate effect is needed whenever the latest attempt's outcome is unknown. Stage
        checkpoints are kept (the next attempt resumes after them) unless `clear_checkpoints`."""
        check_job_id(job_id)
        _check_reason(reason)
        async with self._db.transaction(tenant) as conn:
            job = await retry_in(
                conn,
                tenant,
                actor,
                job_id,
                reason,
                accept_duplicate_risk=accept_duplicate_risk,
                clear_checkpoints=clear_checkpoints,
            )
        log.info("job reopened by manual retry", extra=job_fields(job, actor=actor, reason=reason))
        return job


async def cancel_in(conn: Connection, tenant: TenantId, actor: str, job_id: JobId, reason: str) -> Job:
    """CancelJob's rule inside the caller's transaction (scoped to `tenant`), which bulk actions share:
    raises NotFound or FailedPrecondition (JOB_ALREADY_ENDED) having changed nothing."""
    job = await job_store.cancel(conn, tenant=tenant, job_id=job_id, actor=actor, reason=reason)
    if job is not None:
        return job
    current = await job_store.get_job(conn, tenant, job_id)
    if current is None:
        raise NotFound()
    raise FailedPrecondition(
        f"the job already ended: it is {current.state.value}",
        reason="JOB_ALREADY_ENDED",
        metadata={"state": current.state.value},
    )


async def retry_in(
    conn: Connection,
    tenant: TenantId,
    actor: str,
    job_id: JobId,
    reason: str,
    *,
    accept_duplicate_risk: bool,
    clear_checkpoints: bool = False,
) -> Job:
    """RetryJob's rule inside the caller's transaction (scoped to `tenant`), which bulk actions share:
    the job's locks are held until that transaction ends; a refusal raises having written nothing."""
    candidate = await job_store.lock_for_retry(conn, tenant, job_id)
    if candidate is None:
        raise NotFound()
    _check_retryable(candidate, accept_duplicate_risk)
    if candidate.singleton_key is not None:
        await _check_singleton_free(conn, tenant, candidate.singleton_key)
    next_state = await _reopened_state(conn, tenant, candidate)
    note = f"manual retry by {actor}" + (f": {reason}" if reason else "")
    if candidate.duplicate_risk:
        note += " (duplicate risk accepted)"
    if clear_checkpoints:
        note += " (checkpoints cleared)"
        await checkpoint_store.clear(conn, tenant, job_id)
    job = await job_store.reopen(
        conn,
        tenant=tenant,
        job_id=job_id,
        expected=candidate.state,
        next_state=next_state,
        actor=actor,
        reason=note,
        duplicate_risk_accepted=candidate.duplicate_risk,
    )
    assert job is not None  # the row is locked and was checked above
    return job


def _check_retryable(candidate: job_store.RetryCandidate, accept_duplicate_risk: bool) -> None:
    if candidate.state not in _RETRYABLE_STATES:
        raise FailedPrecondition(
            f"only FAILED, CANCELLED or OUTCOME_UNKNOWN jobs can be retried; this one is {candidate.state.value}",
            reason="NOT_RETRYABLE",
            metadata={"state": candidate.state.value},
        )
    if candidate.duplicate_risk and not accept_duplicate_risk:
        raise FailedPrecondition(
            "the latest attempt's outcome is unknown: its external effect may have happened; "
            "set accept_duplicate_risk to run it again",
            reason="DUPLICATE_RISK_NOT_ACCEPTED",
        )
    if candidate.resource_version is not None and candidate.resource_version <= candidate.deleted_version:
        raise ResourceDeleted()
    if candidate.latest_version is not None and (candidate.resource_version or 0) < candidate.latest_version:
        raise FailedPrecondition(
            f"version {candidate.latest_version} of this resource was submitted since; its result would be stale",
            reason="NEWER_VERSION_EXISTS",
            metadata={"latest_version": str(candidate.latest_version)},
        )


async def _check_singleton_free(conn: Connection, tenant: TenantId, singleton_key: str) -> None:
    """A singleton is reopened only while no other job with its key is active (under the key's lock, as
    submissions of it decide)."""
    await job_store.lock_key(conn, "singleton", tenant, singleton_key)
    active = await job_store.active_singleton(conn, tenant, singleton_key)
    if active is not None:
        raise FailedPrecondition(
            f"job {active.job_id} with this singleton_key is {active.state.value}; it must end first",
            reason="SINGLETON_ACTIVE",
            metadata={"job_id": active.job_id},
        )


async def _reopened_state(conn: Connection, tenant: TenantId, candidate: job_store.RetryCandidate) -> JobState:
    """PENDING when every dependency succeeded, BLOCKED while one is unfinished. A dependency that
    ended badly must be retried first; one that no longer exists (deleted before its dependents were
    kept, or by hand) can never settle a BLOCKED job, nor tell whether it succeeded: both are refused."""
    if not candidate.depends_on:
        return JobState.PENDING
    states = await job_store.dependency_states(conn, tenant, candidate.depends_on)
    for dep in candidate.depends_on:
        if dep not in states:
            raise FailedPrecondition(
                f"dependency {dep} no longer exists, so whether it succeeded is unknown; submit the job again",
                reason="DEPENDENCY_MISSING",
                metadata={"dependency": dep},
            )
        if states[dep] in _ENDED_BADLY:
            raise FailedPrecondition(
                f"dependency {dep} ended {states[dep].value}; retry it first",
                reason="DEPENDENCY_FAILED",
                metadata={"dependency": dep},
            )
    if all(states[dep] is JobState.SUCCEEDED for dep in candidate.depends_on):
        return JobState.PENDING
    return JobState.BLOCKED
