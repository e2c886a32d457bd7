"""What an operator looks at across tenants: queue lines and a job's full detail."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.domain.checkpoints import Checkpoint, Progress
from shared.domain.ids import JobId
from shared.domain.job_logs import JobLogLine
from shared.domain.jobs import Job, JobEvent, JobState, Receipt


@dataclass(frozen=True)
class QueueLine:
    """Open jobs of one kind and tenant; failed ones count only within the recent window."""

    tenant: str
    kind: str
    pending: int
    retry_wait: int
    blocked: int
    running: int
    outcome_unknown: int
    failed_recently: int
    # Age of the oldest runnable job (pending or retry wait, due); None when none is due.
    oldest_wait_seconds: float | None
    paused: bool
    pause_reason: str
    # Runnable jobs wait because a running limit on `kind:<kind>` or `tenant:<tenant>` is full.
    throttled: bool

    @property
    def depth(self) -> int:
        return self.pending + self.retry_wait + self.blocked


@dataclass(frozen=True)
class Relative:
    job_id: JobId
    kind: str
    state: JobState
    # True: the job waits for this one; False: this one waits for the job.
    is_dependency: bool


@dataclass(frozen=True)
class Preview:
    """The start of a payload or result and its full size."""

    head: bytes
    total_bytes: int

    @property
    def truncated(self) -> bool:
        return len(self.head) < self.total_bytes


@dataclass(frozen=True)
class JobDetail:
    job: Job
    payload: Preview
    result: Preview | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    # A retry needs the operator's consent to a possible duplicate external effect.
    duplicate_risk: bool
    events: list[JobEvent]
    receipts: list[Receipt]
    # The jobs this one waits for (a submission names at most 100).
    dependencies: list[Relative]
    # One page of the jobs that wait for this one, of which there may be tens of thousands: those after
    # `dependents_after` in job id order, and where the next page starts (None on the last).
    dependents: list[Relative]
    dependents_after: JobId | None = None
    more_dependents_after: JobId | None = None
    checkpoints: tuple[Checkpoint, ...] = ()
    progress: Progress | None = None
    # What its handlers logged, oldest first, the first LOG_LINES_SHOWN_MAX of them.
    logs: tuple[JobLogLine, ...] = ()
    # One page of the jobs its handler spawned (up to 1,000), paged as the dependents are.
    children: tuple[Relative, ...] = ()
    children_after: JobId | None = None
    more_children_after: JobId | None = None

    @property
    def version(self) -> str:
        """Changes whenever the job page would: a transition, or a progress report of its attempt."""
        reported = self.progress.updated_at.timestamp() if self.progress else 0
        return f"{self.job.sequence}-{reported}"
