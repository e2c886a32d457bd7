"""The job aggregate: states, categories and the records passed between layers."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from durable_jobs.children import SpawnedJob, child_bytes
from durable_jobs.logs import LogLine

# A handler raises and records these, so they are the SDK's; re-exported as the domain's own.
from durable_jobs.records import ErrorCategory as ErrorCategory
from durable_jobs.records import Receipt as Receipt
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.limit_keys import WaitingReason
from shared.domain.trace_context import TraceContext

if TYPE_CHECKING:  # checkpoints imports this module
    from shared.domain.checkpoints import Checkpoint, Progress


class JobState(enum.StrEnum):
    """Values equal the database enum's labels."""

    PENDING = "pending"
    BLOCKED = "blocked"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    OUTCOME_UNKNOWN = "outcome_unknown"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED})


class ReportOutcome(enum.StrEnum):
    ACCEPTED = "accepted"
    LEASE_LOST = "lease_lost"
    JOB_CANCELLED = "job_cancelled"
    JOB_SUPERSEDED = "job_superseded"
    # The job's resource version was deleted (DeleteResource): nothing of it is stored again.
    RESOURCE_DELETED = "resource_deleted"
    # A completion whose result is over the API's maximum: nothing was stored, and the attempt failed
    # PERMANENT with a message naming the limit.
    RESULT_TOO_LARGE = "result_too_large"
    # A completion carrying a spawned job its tenant may not submit (an unknown kind, a field out of
    # bounds, too many): nothing was stored, and the attempt failed PERMANENT naming the child's problem.
    CHILDREN_REFUSED = "children_refused"


@dataclass(frozen=True)
class JobError:
    category: ErrorCategory
    message: str
    # An unclassified exception's bounded traceback (innermost frame last); empty otherwise.
    traceback: str = ""


@dataclass(frozen=True)
class Debounce:
    """Submissions with one key collapse into one job that runs with the latest payload once the key has
    been quiet for `quiet_seconds`, or `max_wait_seconds` after the first of them at the latest."""

    key: str
    quiet_seconds: float
    max_wait_seconds: float


@dataclass(frozen=True)
class NewJob:
    """A validated submission, ready to be stored."""

    kind: str
    payload: bytes
    idempotency_key: str | None = None
    priority: int = 0
    run_after: datetime | None = None
    max_attempts: int = 0
    deadline: datetime | None = None
    resource_key: str | None = None
    resource_version: int | None = None
    depends_on: tuple[JobId, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    dedupe_by_input: bool = False
    # As the caller wrote them (`name` or `name@N`); scoped to the tenant when stored.
    limit_keys: tuple[str, ...] = ()
    # Tenant-scoped keys: run one at a time in acceptance order; at most one active; collapse a burst.
    sequence_key: str | None = None
    singleton_key: str | None = None
    debounce: Debounce | None = None
    # From the request's metadata, not its fields: not part of the request an idempotency key names.
    trace_context: TraceContext | None = None


@dataclass(frozen=True)
class PlainBatch:
    """Plain submissions of one call (SubmitJobs' common case: no key, resource, dependency or limit), as
    columns in request order: the fields such a submission may set, one list each, and the call's trace
    context. Carried as lists rather than a NewJob each, which cost more than all the rest of its path."""

    kinds: list[str]
    payloads: list[bytes]
    priorities: list[int]
    max_attempts: list[int]
    run_afters: list[datetime | None]
    deadlines: list[datetime | None]
    labels: list[dict[str, str]]
    trace_context: TraceContext | None = None

    def __len__(self) -> int:
        return len(self.kinds)

    def new_jobs(self) -> list[NewJob]:
        """The same submissions one by one, as the general path takes them."""
        return [
            NewJob(
                kind=kind,
                payload=payload,
                priority=priority,
                run_after=run_after,
                max_attempts=max_attempts,
                deadline=deadline,
                labels=labels,
                trace_context=self.trace_context,
            )
            for kind, payload, priority, max_attempts, run_after, deadline, labels in zip(
                self.kinds,
                self.payloads,
                self.priorities,
                self.max_attempts,
                self.run_afters,
                self.deadlines,
                self.labels,
                strict=True,
            )
        ]


@dataclass(frozen=True)
class Job:
    job_id: JobId
    tenant: TenantId
    kind: str
    state: JobState
    attempts: int
    max_attempts: int
    priority: int
    created_at: datetime
    run_after: datetime
    started_at: datetime | None
    finished_at: datetime | None
    deadline: datetime | None
    last_error: JobError | None
    cancel_requested: bool
    resource_key: str | None
    resource_version: int | None
    sequence: int
    fencing_token: FencingToken
    idempotency_key: str | None
    depends_on: tuple[JobId, ...]
    labels: dict[str, str]
    # Read beside the row by the calls that show them (GetJob; WatchJob for progress).
    progress: Progress | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    # Why a runnable job is not being started (a pause, a hold, a full limit); read for one job on request.
    waiting: WaitingReason | None = None
    sequence_key: str | None = None
    singleton_key: str | None = None
    debounce_key: str | None = None
    # The job whose handler spawned this one (ctx.spawn); None for a submitted job.
    parent_job_id: JobId | None = None


@dataclass(frozen=True)
class SubmitOutcome:
    job: Job
    created: bool


@dataclass(frozen=True)
class JobResult:
    job_id: JobId
    payload: bytes
    attempt: int
    fencing_token: FencingToken
    created_at: datetime


@dataclass(frozen=True)
class LeaseRef:
    job_id: JobId
    fencing_token: FencingToken


@dataclass(frozen=True)
class LeaseStatus:
    job_id: JobId
    fencing_token: FencingToken
    held: bool
    cancel_requested: bool
    superseded: bool
    lease_expires_at: datetime | None
    # ACCEPTED while held (a requested cancel included: the holder still reports it); otherwise the
    # refusal any report under this lease would get. The flags say the same for older readers.
    outcome: ReportOutcome
    # The job's resource version was deleted; cancel_requested is set too, so a worker stops as for a cancel.
    resource_deleted: bool = False
    # Not held because the holder's own completion or failure report already ended the attempt.
    ended_by_holder: bool = False


def child_size(job: NewJob) -> int:
    """What a spawned job counts against its parent's CHILDREN_BYTES_MAX."""
    return child_bytes(job.kind, job.payload, job.labels, job.depends_on, job.limit_keys)


@dataclass(frozen=True)
class ChildJob:
    """A job a handler spawned: its id, made by the worker, and its submission. It is created only with
    its parent's accepted completion, in that transaction, in its parent's tenant."""

    job_id: JobId
    job: NewJob

    @classmethod
    def of(cls, spawned: SpawnedJob, trace_context: TraceContext | None = None) -> ChildJob:
        """What a handler's ctx.spawn recorded, as its parent's completion carries it, in the parent's
        trace when it has one."""
        return cls(
            spawned.job_id,
            NewJob(
                kind=spawned.kind,
                payload=spawned.payload,
                priority=spawned.priority,
                run_after=spawned.run_after,
                max_attempts=spawned.max_attempts,
                deadline=spawned.deadline,
                depends_on=spawned.depends_on,
                labels=dict(spawned.labels),
                limit_keys=spawned.limit_keys,
                trace_context=trace_context,
            ),
        )


@dataclass(frozen=True)
class Completion:
    job_id: JobId
    fencing_token: FencingToken
    result: bytes
    # In the order the handler spawned them: a child may depend on the ones before it.
    children: tuple[ChildJob, ...] = ()


@dataclass(frozen=True)
class CompletionBatch:
    """Completions without children (a worker's usual CompleteJobs) as columns, in request order."""

    job_ids: list[JobId]
    fencing_tokens: list[FencingToken]
    results: list[bytes]

    @classmethod
    def of(cls, completions: Sequence[Completion]) -> CompletionBatch:
        return cls(
            [c.job_id for c in completions], [c.fencing_token for c in completions], [c.result for c in completions]
        )

    def __len__(self) -> int:
        return len(self.job_ids)

    def completions(self) -> list[Completion]:
        return [
            Completion(job_id, token, result)
            for job_id, token, result in zip(self.job_ids, self.fencing_tokens, self.results, strict=True)
        ]


@dataclass(frozen=True)
class FailOutcome:
    state: JobState
    next_attempt_at: datetime | None


# The longest wait a handler's retry hint may ask for; a longer one is cut to it, and the job is pushed
# back again if the provider still refuses then.
RETRY_AFTER_MAX_SECONDS = 7 * 24 * 3600.0
# Pushbacks of one job that do not count as attempts; every further one counts, so that a job whose
# provider pushes it back forever still ends when its attempts run out.
PUSHBACKS_UNCOUNTED_MAX = 100


@dataclass(frozen=True)
class RetryHint:
    """When the handler asked for the next attempt: `after_seconds` from now. A pushback (the provider
    said "not now") is not counted as an attempt; `limit_key` names what the provider throttled."""

    after_seconds: float
    pushed_back: bool = False
    limit_key: str | None = None


@dataclass(frozen=True)
class FailureReport:
    lease: LeaseRef
    error: JobError
    hint: RetryHint | None = None


@dataclass(frozen=True)
class ReleaseReport:
    lease: LeaseRef
    started: bool
    reason: str
    # The attempt's unshipped log lines (sequence, line), kept in the release's transaction.
    last_lines: tuple[tuple[int, LogLine], ...] = ()


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made building a
# claimed row six times as costly, for the rows a worker makes most of. Nothing changes one after its claim.
@dataclass(slots=True)
class ClaimedJob:
    """A row a worker claimed: everything its handler needs, and the lease it holds."""

    job_id: JobId
    tenant: TenantId
    kind: str
    payload: bytes
    attempt: int
    max_attempts: int
    fencing_token: FencingToken
    lease_expires_at: datetime
    created_at: datetime
    queued_since: datetime
    claimed_at: datetime
    # The submitter's trace, which the attempt's span continues.
    trace_context: TraceContext | None = None
    # The stages earlier attempts finished, read in the claim's transaction.
    checkpoints: tuple[Checkpoint, ...] = ()

    @property
    def leased_before(self) -> bool:
        """Whether an earlier lease of this job existed, under which stages could have been checkpointed:
        each claim raises the token by one from 0 and only a lease holder records a checkpoint, so a job
        on its first lease (token 1) has none."""
        return self.fencing_token > 1


@dataclass(frozen=True)
class JobEvent:
    """One recorded transition."""

    job_id: JobId
    sequence: int
    from_state: JobState | None
    to_state: JobState
    attempt: int
    fencing_token: FencingToken
    actor: str
    reason: str
    at: datetime
    # The error of the attempt this transition ended, when it ended by a failure report.
    error: JobError | None = None


@dataclass(frozen=True)
class ListFilter:
    states: tuple[JobState, ...] = ()
    kind: str | None = None
    resource_key: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # Only the jobs this job spawned (ListJobs(parent_job_id=…)).
    parent_job_id: JobId | None = None
    # Only the jobs still holding this sequence of the tenant's, in its order (ListJobs(sequence_key=…)).
    sequence_key: str | None = None


@dataclass(frozen=True)
class PageCursor:
    """Position after the last job of a page (newest first)."""

    created_at: datetime
    job_id: JobId
    # In a sequence's listing (its order, not newest first): whether the last job was waiting behind the
    # head, and its place in the sequence.
    sequence_place: tuple[bool, int] | None = None


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    next_cursor: PageCursor | None


def refusal_outcome(state: JobState | None, *, resource_deleted: bool = False) -> ReportOutcome:
    """Why a fenced report found no running row with its token: a tombstone over the job's version,
    else the job's current state, decides."""
    if resource_deleted:
        return ReportOutcome.RESOURCE_DELETED
    if state is JobState.CANCELLED:
        return ReportOutcome.JOB_CANCELLED
    if state is JobState.SUPERSEDED:
        return ReportOutcome.JOB_SUPERSEDED
    return ReportOutcome.LEASE_LOST
