"""Workers' fenced reports. The fencing check happens inside the SQL statement that writes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from shared.domain.errors import (
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    JobCancelled,
    JobSuperseded,
    LeaseLost,
    ResourceDeleted,
)
from shared.domain.ids import JobId
from shared.domain.jobs import (
    Completion,
    FailOutcome,
    JobError,
    JobState,
    LeaseRef,
    LeaseStatus,
    ReportOutcome,
)
from shared.domain.submission_rules import is_job_id
from shared.storage import dependency_results, job_store, lease_store
from shared.storage.database import Database
from shared.storage.dependency_results import DependencyResultsPage

log = logging.getLogger(__name__)
REPORT_BATCH_MAX = 1000
ERROR_MESSAGE_MAX_CHARS = 4000
# The innermost frames are kept when a traceback is longer.
TRACEBACK_MAX_CHARS = 16000
LEASE_MIN_SECONDS = 1.0
# Payload bytes on one page of dependency results: well under gRPC's default 4 MiB message limit.
DEPENDENCY_RESULTS_PAGE_BYTES = 2 * 1024 * 1024


class RejectionCounter(Protocol):
    def rejected(self, outcome: ReportOutcome) -> None: ...


def _refusal(outcome: ReportOutcome) -> FailedPrecondition:
    if outcome is ReportOutcome.JOB_CANCELLED:
        return JobCancelled()
    if outcome is ReportOutcome.JOB_SUPERSEDED:
        return JobSuperseded()
    if outcome is ReportOutcome.RESOURCE_DELETED:
        return ResourceDeleted()
    return LeaseLost()


def _check_leases(leases: Sequence[LeaseRef], field: str) -> None:
    if len(leases) > REPORT_BATCH_MAX:
        raise InvalidArgument(FieldViolation(field, f"must hold at most {REPORT_BATCH_MAX} items"))
    for index, lease in enumerate(leases):
        if not is_job_id(lease.job_id):
            raise InvalidArgument(FieldViolation(f"{field}[{index}].job_id", "must be a job id"))
        if lease.fencing_token < 1:
            raise InvalidArgument(FieldViolation(f"{field}[{index}].fencing_token", "must be positive"))


class WorkerReports:
    def __init__(self, db: Database, rejections: RejectionCounter, *, lease_max_seconds: float) -> None:
        self._db = db
        self._rejections = rejections
        self._lease_max_seconds = lease_max_seconds

    async def heartbeat(self, leases: Sequence[LeaseRef], extend_by_seconds: float) -> list[LeaseStatus]:
        _check_leases(leases, "leases")
        if not LEASE_MIN_SECONDS <= extend_by_seconds <= self._lease_max_seconds:
            raise InvalidArgument(FieldViolation("extend_by", f"must be between 1s and {self._lease_max_seconds:g}s"))
        if not leases:
            return []
        async with self._db.transaction() as conn:
            statuses = await lease_store.heartbeat(conn, leases, lease_seconds=extend_by_seconds)
        for status in statuses:
            if not status.held and not status.ended_by_holder:
                outcome = (
                    ReportOutcome.RESOURCE_DELETED
                    if status.resource_deleted
                    else ReportOutcome.JOB_CANCELLED
                    if status.cancel_requested
                    else ReportOutcome.JOB_SUPERSEDED
                    if status.superseded
                    else ReportOutcome.LEASE_LOST
                )
                # Usual after a cancel or a newer version, so no warning: the worker stops the job.
                lease = LeaseRef(status.job_id, status.fencing_token)
                self._refused("heartbeat", lease, outcome, "", level=logging.INFO)
        return statuses

    async def complete_many(self, worker_id: str, completions: Sequence[Completion]) -> list[ReportOutcome]:
        """Per-item outcomes; a refused item changes nothing and does not affect the others."""
        _check_leases([LeaseRef(c.job_id, c.fencing_token) for c in completions], "completions")
        if not completions:
            return []
        if len({c.job_id for c in completions}) != len(completions):
            raise InvalidArgument(FieldViolation("completions", "must not name a job twice"))
        async with self._db.transaction() as conn:
            outcomes = await lease_store.complete_batch(conn, worker_id=worker_id, completions=completions)
        for completion, outcome in zip(completions, outcomes, strict=True):
            if outcome is not ReportOutcome.ACCEPTED:
                self._refused("completion", LeaseRef(completion.job_id, completion.fencing_token), outcome, worker_id)
        return outcomes

    async def complete(self, worker_id: str, completion: Completion) -> JobState:
        (outcome,) = await self.complete_many(worker_id, [completion])
        if outcome is not ReportOutcome.ACCEPTED:
            raise _refusal(outcome)
        return JobState.SUCCEEDED

    async def fail(self, worker_id: str, lease: LeaseRef, error: JobError) -> FailOutcome:
        _check_leases([lease], "lease")
        error = JobError(
            error.category,
            error.message[:ERROR_MESSAGE_MAX_CHARS].replace("\x00", ""),
            error.traceback[-TRACEBACK_MAX_CHARS:].replace("\x00", ""),
        )
        async with self._db.transaction() as conn:
            outcome = await lease_store.fail_attempt(conn, worker_id=worker_id, lease=lease, error=error)
            if not isinstance(outcome, ReportOutcome) and outcome.state is not JobState.CANCELLED:
                await job_store.record_attempt_error(conn, lease, error)
        if isinstance(outcome, ReportOutcome):
            self._refused("failure", lease, outcome, worker_id)
            raise _refusal(outcome)
        return outcome

    async def release(self, worker_id: str, lease: LeaseRef, *, started: bool, reason: str) -> JobState:
        _check_leases([lease], "lease")
        async with self._db.transaction() as conn:
            outcome = await lease_store.release(
                conn,
                worker_id=worker_id,
                lease=lease,
                started=started,
                reason=reason[:200].replace("\x00", "") or "released",
            )
        if isinstance(outcome, ReportOutcome):
            self._refused("release", lease, outcome, worker_id)
            raise _refusal(outcome)
        return outcome

    async def dependency_results(self, lease: LeaseRef, after: JobId | None) -> DependencyResultsPage:
        """A page of the results of the jobs the leased job depends on; only its current lease holder reads."""
        _check_leases([lease], "lease")
        if after is not None and not is_job_id(after):
            raise InvalidArgument(FieldViolation("after_job_id", "must be a job id"))
        async with self._db.transaction() as conn:
            page = await dependency_results.read_page(
                conn,
                job_id=lease.job_id,
                fencing_token=lease.fencing_token,
                after=after,
                max_bytes=DEPENDENCY_RESULTS_PAGE_BYTES,
            )
            outcome = await lease_store.refusal_for(conn, lease.job_id) if page is None else None
        if page is None:
            assert outcome is not None
            self._refused("dependency results", lease, outcome, "", level=logging.INFO)
            raise _refusal(outcome)
        return page

    def _refused(
        self, report: str, lease: LeaseRef, outcome: ReportOutcome, worker_id: str, *, level: int = logging.WARNING
    ) -> None:
        """Counts and logs a report the fencing check refused; it changed nothing, so it is no transition."""
        self._rejections.rejected(outcome)
        log.log(
            level,
            "%s refused: %s",
            report,
            outcome.value,
            extra={
                "job_id": lease.job_id,
                "fencing_token": lease.fencing_token,
                "reason": outcome.value,
                "worker_id": worker_id or None,
            },
        )
