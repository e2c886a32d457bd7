"""Workers' fenced reports. The fencing check happens inside the SQL statement that writes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from api_service.usecases.child_jobs import ChildJobs
from shared.domain.checkpoints import (
    CHECKPOINTS_PER_JOB_MAX,
    Checkpoint,
    ProgressReport,
    clean_progress_message,
    data_problem,
    fraction_problem,
    stage_problem,
)
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
from shared.domain.job_logs import LOG_LEVELS, LOG_LINES_PER_CALL_MAX, LOG_SEQUENCE_MAX, AttemptLog, clean_line
from shared.domain.jobs import (
    PUSHBACKS_UNCOUNTED_MAX,
    RETRY_AFTER_MAX_SECONDS,
    Completion,
    CompletionBatch,
    ErrorCategory,
    FailOutcome,
    FailureReport,
    JobError,
    JobState,
    LeaseRef,
    LeaseStatus,
    ReleaseReport,
    ReportOutcome,
    RetryHint,
)
from shared.domain.results import RESULT_LIMIT_BYTES_DEFAULT, result_too_large
from shared.domain.submission_rules import are_job_ids, is_job_id
from shared.storage import (
    checkpoint_store,
    dependency_results,
    job_store,
    lease_store,
    log_store,
    progress_store,
    scheduling_store,
)
from shared.storage.database import Connection, Database
from shared.storage.dependency_results import DependencyResultsPage
from shared.storage.refusals import refusal

log = logging.getLogger(__name__)
REPORT_BATCH_MAX = 1000
ERROR_MESSAGE_MAX_CHARS = 4000
# The innermost frames are kept when a traceback is longer.
TRACEBACK_MAX_CHARS = 16000
LEASE_MIN_SECONDS = 1.0
LIMIT_KEY_MAX_CHARS = 200
RELEASE_REASON_MAX_CHARS = 200
# Payload bytes on one page of dependency results: well under gRPC's default 4 MiB message limit.
DEPENDENCY_RESULTS_PAGE_BYTES = 2 * 1024 * 1024


class RejectionCounter(Protocol):
    def rejected(self, outcome: ReportOutcome) -> None: ...


def _refusal(outcome: ReportOutcome) -> FailedPrecondition:
    if outcome is ReportOutcome.RESULT_TOO_LARGE:
        return FailedPrecondition(
            "the result is over the maximum (JOBS_MAX_RESULT_BYTES): the attempt failed PERMANENT",
            reason="RESULT_TOO_LARGE",
        )
    if outcome is ReportOutcome.CHILDREN_REFUSED:
        return FailedPrecondition(
            "a spawned job was refused (see the job's last error): the attempt failed PERMANENT",
            reason="CHILDREN_REFUSED",
        )
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


def _checked_hint(hint: RetryHint | None, field: str) -> RetryHint | None:
    """A hint within bounds: a wait longer than the maximum is cut to it, a negative one refused."""
    if hint is None:
        return None
    if not hint.after_seconds >= 0:  # also refuses NaN
        raise InvalidArgument(FieldViolation(f"{field}.retry_after", "must not be negative"))
    key = hint.limit_key or None
    if key is not None and (len(key) > LIMIT_KEY_MAX_CHARS or not key.isprintable()):
        raise InvalidArgument(
            FieldViolation(f"{field}.limit_key", f"must be at most {LIMIT_KEY_MAX_CHARS} printable characters")
        )
    return RetryHint(min(hint.after_seconds, RETRY_AFTER_MAX_SECONDS), hint.pushed_back, key)


def _checked_failure(report: FailureReport, field: str) -> FailureReport:
    error = JobError(
        report.error.category,
        report.error.message[:ERROR_MESSAGE_MAX_CHARS].replace("\x00", ""),
        report.error.traceback[-TRACEBACK_MAX_CHARS:].replace("\x00", ""),
    )
    return FailureReport(report.lease, error, _checked_hint(report.hint, field))


def _checked_logs(logs: Sequence[AttemptLog], field: str, lines_field: str) -> dict[JobId, AttemptLog]:
    """Each attempt's lines, cleaned, by job; refuses a call with too many lines or a line out of bounds."""
    if sum(len(log.lines) for log in logs) > LOG_LINES_PER_CALL_MAX:
        raise InvalidArgument(FieldViolation(field, f"at most {LOG_LINES_PER_CALL_MAX} lines in one call"))
    for index, log in enumerate(logs):
        for number, (sequence, line) in enumerate(log.lines):
            if not 1 <= sequence <= LOG_SEQUENCE_MAX or line.level not in LOG_LEVELS:
                where = f"{field}[{index}].{lines_field}[{number}]"
                raise InvalidArgument(
                    FieldViolation(where, f"sequence is 1 to {LOG_SEQUENCE_MAX}, level one of {sorted(LOG_LEVELS)}")
                )
    return {log.job_id: AttemptLog(log.lease, tuple((n, clean_line(line)) for n, line in log.lines)) for log in logs}


def _check_distinct(leases: Sequence[LeaseRef], field: str) -> None:
    _check_leases(leases, field)
    if len({lease.job_id for lease in leases}) != len(leases):
        raise InvalidArgument(FieldViolation(field, "must not name a job twice"))


class WorkerReports:
    def __init__(
        self,
        db: Database,
        rejections: RejectionCounter,
        *,
        lease_max_seconds: float,
        max_result_bytes: int = RESULT_LIMIT_BYTES_DEFAULT,
        children: ChildJobs | None = None,
    ) -> None:
        self._db = db
        self._children = children
        self._rejections = rejections
        self._lease_max_seconds = lease_max_seconds
        self._max_result_bytes = max_result_bytes

    async def heartbeat(self, leases: Sequence[LeaseRef], extend_by_seconds: float) -> list[LeaseStatus]:
        _check_leases(leases, "leases")
        if not LEASE_MIN_SECONDS <= extend_by_seconds <= self._lease_max_seconds:
            raise InvalidArgument(FieldViolation("extend_by", f"must be between 1s and {self._lease_max_seconds:g}s"))
        if not leases:
            return []
        async with self._db.transaction() as conn:
            statuses = await lease_store.heartbeat(conn, leases, lease_seconds=extend_by_seconds)
        for status in statuses:
            if status.outcome is not ReportOutcome.ACCEPTED and not status.ended_by_holder:
                # Usual after a cancel or a newer version, so no warning: the worker stops the job.
                lease = LeaseRef(status.job_id, status.fencing_token)
                self._refused("heartbeat", lease, status.outcome, "", level=logging.INFO)
        return statuses

    async def complete_many(self, worker_id: str, completions: Sequence[Completion]) -> list[ReportOutcome]:
        """Per-item outcomes; a refused item changes nothing and does not affect the others. A result over
        the maximum is not stored: its attempt fails PERMANENT naming the limit (RESULT_TOO_LARGE)."""
        _check_leases([LeaseRef(c.job_id, c.fencing_token) for c in completions], "completions")
        if not completions:
            return []
        if len({c.job_id for c in completions}) != len(completions):
            raise InvalidArgument(FieldViolation("completions", "must not name a job twice"))
        too_large = {c.job_id: m for c in completions if (m := result_too_large(len(c.result), self._max_result_bytes))}
        outcomes = await self._fail_refused(worker_id, completions, too_large, ReportOutcome.RESULT_TOO_LARGE)
        refused = await self._children_refused([c for c in completions if c.children and c.job_id not in too_large])
        outcomes.update(await self._fail_refused(worker_id, completions, refused, ReportOutcome.CHILDREN_REFUSED))
        storable = [c for c in completions if c.job_id not in too_large and c.job_id not in refused]
        plain = [c for c in storable if not c.children]
        if plain:
            # Apart from the failures above: each transaction takes its rows in job-id order.
            async with self._db.transaction() as conn:
                stored = await lease_store.complete_batch(conn, worker_id=worker_id, completions=plain)
            outcomes.update(zip((c.job_id for c in plain), stored, strict=True))
        for parent in (c for c in storable if c.children):
            outcomes[parent.job_id] = await self._complete_parent(worker_id, parent)
        for completion in storable:
            outcome = outcomes[completion.job_id]
            if outcome is not ReportOutcome.ACCEPTED:
                self._refused("completion", LeaseRef(completion.job_id, completion.fencing_token), outcome, worker_id)
        return [outcomes[c.job_id] for c in completions]

    async def complete_plain(self, worker_id: str, batch: CompletionBatch) -> list[ReportOutcome]:
        """As complete_many, for completions without children: when every one can be stored (checked
        column by column), one statement from the columns, without an object per completion."""
        if not self._storable_at_once(batch):
            return await self.complete_many(worker_id, batch.completions())
        outcomes = await lease_store.complete_alone(self._db, worker_id=worker_id, batch=batch)
        if outcomes.count(ReportOutcome.ACCEPTED) < len(outcomes):
            for job_id, token, outcome in zip(batch.job_ids, batch.fencing_tokens, outcomes, strict=True):
                if outcome is not ReportOutcome.ACCEPTED:
                    self._refused("completion", LeaseRef(job_id, token), outcome, worker_id)
        return outcomes

    def _storable_at_once(self, batch: CompletionBatch) -> bool:
        """What complete_many checks before its statement, all passed: well-formed leases, no job named
        twice, no result over the maximum. Otherwise complete_many names the problem or fails the attempt."""
        return (
            0 < len(batch) <= REPORT_BATCH_MAX
            and are_job_ids(batch.job_ids)
            and min(batch.fencing_tokens) >= 1
            and len(set(batch.job_ids)) == len(batch)
            and max(map(len, batch.results)) <= self._max_result_bytes
        )

    async def _children_refused(self, parents: Sequence[Completion]) -> dict[JobId, str]:
        if not parents:
            return {}
        if self._children is None:
            return {c.job_id: "this API creates no spawned jobs" for c in parents}
        return await self._children.refusals(parents)

    async def _complete_parent(self, worker_id: str, parent: Completion) -> ReportOutcome:
        """A completion with children, in a transaction of its own (ChildJobs.complete)."""
        assert self._children is not None  # _children_refused refused them all otherwise
        outcome = await self._children.complete(worker_id, parent)
        if isinstance(outcome, ReportOutcome):
            return outcome
        failed = await self._fail_refused(worker_id, [parent], {parent.job_id: outcome}, ReportOutcome.CHILDREN_REFUSED)
        return failed[parent.job_id]

    async def _fail_refused(
        self, worker_id: str, completions: Sequence[Completion], messages: dict[JobId, str], outcome: ReportOutcome
    ) -> dict[JobId, ReportOutcome]:
        """Fails PERMANENT, naming the problem, the attempts whose completions `messages` refuses."""
        completions = [c for c in completions if c.job_id in messages]
        if not completions:
            return {}
        reports = [
            FailureReport(LeaseRef(c.job_id, c.fencing_token), JobError(ErrorCategory.PERMANENT, messages[c.job_id]))
            for c in completions
        ]
        failed = await self.fail_many(worker_id, reports, field="completions")
        for report in reports:
            log.warning("completion refused: %s", report.error.message, extra={"job_id": report.lease.job_id})
        return {
            r.lease.job_id: o if isinstance(o, ReportOutcome) else outcome for r, o in zip(reports, failed, strict=True)
        }

    async def complete(self, worker_id: str, completion: Completion) -> JobState:
        (outcome,) = await self.complete_many(worker_id, [completion])
        if outcome is not ReportOutcome.ACCEPTED:
            raise _refusal(outcome)
        return JobState.SUCCEEDED

    async def fail_many(
        self, worker_id: str, reports: Sequence[FailureReport], *, field: str = "failures"
    ) -> list[FailOutcome | ReportOutcome]:
        """Per-item outcomes, refusals as values; one transaction, rows taken in job-id order like the
        heartbeat and completion batches, so that none of them can deadlock."""
        _check_distinct([r.lease for r in reports], field)
        checked = [_checked_failure(r, f"{field}[{i}]") for i, r in enumerate(reports)]
        outcomes: dict[str, FailOutcome | ReportOutcome] = {}
        async with self._db.transaction() as conn:
            for report in sorted(checked, key=lambda r: r.lease.job_id):
                outcomes[report.lease.job_id] = await self._fail_one(conn, worker_id, report)
        for report in checked:
            outcome = outcomes[report.lease.job_id]
            if isinstance(outcome, ReportOutcome):
                self._refused("failure", report.lease, outcome, worker_id)
        return [outcomes[r.lease.job_id] for r in checked]

    @staticmethod
    async def _hold_key(conn: Connection, job_id: JobId, key: str) -> None:
        """The provider refused the key, not only this job: every job carrying it waits as long."""
        if await scheduling_store.hold_pushed_key(conn, job_id, key) is None:
            log.warning(
                "pushback names a key the job does not carry; no key held", extra={"job_id": job_id, "limit_key": key}
            )

    async def _fail_one(self, conn: Connection, worker_id: str, report: FailureReport) -> FailOutcome | ReportOutcome:
        hint, lease, error = report.hint, report.lease, report.error
        if hint is not None and hint.pushed_back:
            # Not a failure: no attempt error is kept; the history records the pushback itself.
            pushed = await lease_store.push_back(
                conn,
                worker_id=worker_id,
                lease=lease,
                hint=hint,
                message=error.message,
                uncounted_max=PUSHBACKS_UNCOUNTED_MAX,
            )
            if hint.limit_key and isinstance(pushed, FailOutcome) and pushed.state is JobState.PENDING:
                await self._hold_key(conn, lease.job_id, hint.limit_key)
            return pushed
        outcome = await lease_store.fail_attempt(
            conn,
            worker_id=worker_id,
            lease=lease,
            error=error,
            retry_after_seconds=hint.after_seconds if hint is not None else None,
        )
        if not isinstance(outcome, ReportOutcome) and outcome.state is not JobState.CANCELLED:
            await job_store.record_attempt_error(conn, lease, error)
        return outcome

    async def fail(
        self, worker_id: str, lease: LeaseRef, error: JobError, hint: RetryHint | None = None
    ) -> FailOutcome:
        """FailJob's contract: a refusal is an error (FAILED_PRECONDITION)."""
        (outcome,) = await self.fail_many(worker_id, [FailureReport(lease, error, hint)], field="lease")
        if isinstance(outcome, ReportOutcome):
            raise _refusal(outcome)
        return outcome

    async def release_many(
        self, worker_id: str, reports: Sequence[ReleaseReport], *, field: str = "releases"
    ) -> list[JobState | ReportOutcome]:
        """Per-item outcomes, refusals as values; rows taken in job-id order as in fail_many. An item's
        last log lines are kept under its lease first, in the same transaction: one call ends an attempt."""
        _check_distinct([r.lease for r in reports], field)
        last_logs = _checked_logs([AttemptLog(r.lease, r.last_lines) for r in reports], field, "last_lines")
        outcomes: dict[str, JobState | ReportOutcome] = {}
        async with self._db.transaction() as conn:
            for report in sorted(reports, key=lambda r: r.lease.job_id):
                lines = last_logs[report.lease.job_id]
                if lines.lines:
                    (kept,) = await log_store.append_batch(conn, [lines])
                    if kept is not ReportOutcome.ACCEPTED:  # the release would be refused as the lines were
                        outcomes[report.lease.job_id] = kept
                        continue
                outcomes[report.lease.job_id] = await lease_store.release(
                    conn,
                    worker_id=worker_id,
                    lease=report.lease,
                    started=report.started,
                    reason=report.reason[:RELEASE_REASON_MAX_CHARS].replace("\x00", "") or "released",
                )
        for report in reports:
            outcome = outcomes[report.lease.job_id]
            if isinstance(outcome, ReportOutcome):
                self._refused("release", report.lease, outcome, worker_id)
        return [outcomes[r.lease.job_id] for r in reports]

    async def release(self, worker_id: str, lease: LeaseRef, *, started: bool, reason: str) -> JobState:
        """ReleaseJob's contract: a refusal is an error (FAILED_PRECONDITION)."""
        (outcome,) = await self.release_many(worker_id, [ReleaseReport(lease, started, reason)], field="lease")
        if isinstance(outcome, ReportOutcome):
            raise _refusal(outcome)
        return outcome

    async def record_checkpoint(
        self, worker_id: str, lease: LeaseRef, stage: str, data: bytes
    ) -> Checkpoint | ReportOutcome:
        """The stored checkpoint, or the refusal (as a value) when the lease is not held."""
        _check_leases([lease], "lease")
        violations = [
            FieldViolation(name, problem)
            for name, problem in (("stage", stage_problem(stage)), ("data", data_problem(data)))
            if problem is not None
        ]
        if violations:
            raise InvalidArgument(violations)
        try:
            async with self._db.transaction() as conn:
                stored = await checkpoint_store.record(conn, lease, stage, data, max_stages=CHECKPOINTS_PER_JOB_MAX)
        except checkpoint_store.NoRoomForStage:
            raise FailedPrecondition(
                f"a job holds at most {CHECKPOINTS_PER_JOB_MAX} checkpointed stages",
                reason="CHECKPOINT_LIMIT",
                metadata={"stage": stage},
            ) from None
        if isinstance(stored, ReportOutcome):
            self._refused("checkpoint", lease, stored, worker_id)
        return stored

    async def report_progress(self, reports: Sequence[ProgressReport]) -> list[ReportOutcome]:
        """Per-report outcomes; refusals are usual (a report that crossed the attempt's end) and not logged."""
        _check_leases([r.lease for r in reports], "reports")
        if len({r.job_id for r in reports}) != len(reports):
            raise InvalidArgument(FieldViolation("reports", "must not name a job twice"))
        for index, report in enumerate(reports):
            problem = fraction_problem(report.fraction)
            if problem is not None:
                raise InvalidArgument(FieldViolation(f"reports[{index}].fraction", problem))
        if not reports:
            return []
        cleaned = [ProgressReport(r.lease, r.fraction, clean_progress_message(r.message)) for r in reports]
        async with self._db.transaction() as conn:
            return await progress_store.record_batch(conn, cleaned)

    async def append_logs(self, logs: Sequence[AttemptLog]) -> list[ReportOutcome]:
        """Per-attempt outcomes; a refusal (lines that crossed the attempt's end) is usual and not logged."""
        _check_distinct([log.lease for log in logs], "logs")
        cleaned = list(_checked_logs(logs, "logs", "lines").values())
        shipped = [log for log in cleaned if log.lines]
        if not shipped:
            return [ReportOutcome.ACCEPTED for _ in logs]
        async with self._db.transaction() as conn:
            outcomes = dict(zip((id(log) for log in shipped), await log_store.append_batch(conn, shipped), strict=True))
        return [outcomes.get(id(log), ReportOutcome.ACCEPTED) for log in cleaned]

    async def dependency_results(self, lease: LeaseRef, after: JobId | None) -> DependencyResultsPage | ReportOutcome:
        """A page of the results of the jobs the leased job depends on; only its current lease holder
        reads, anyone else learns the refusal (as a value)."""
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
            outcome = await refusal(conn, lease.job_id) if page is None else None
        if outcome is not None:
            self._refused("dependency results", lease, outcome, "", level=logging.INFO)
            return outcome
        assert page is not None
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
