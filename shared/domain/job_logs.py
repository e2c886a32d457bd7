"""Handlers' log lines kept with their attempt: their record, their bounds, the page position."""

from __future__ import annotations

from dataclasses import dataclass

from durable_jobs.logs import (
    JOB_LOG_LINES_PER_ATTEMPT_MAX,
    JOB_LOG_LOGGER_MAX_CHARS,
    JOB_LOG_MESSAGE_MAX_CHARS,
    LogLine,
    clean_line,
)
from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import LeaseRef

# One more than the handler's bound: the closing line that says how many were not kept.
LOG_SEQUENCE_MAX = JOB_LOG_LINES_PER_ATTEMPT_MAX + 1
LOG_LINES_PER_CALL_MAX = 1000
LOG_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})

__all__ = [
    "JOB_LOG_LOGGER_MAX_CHARS",
    "JOB_LOG_MESSAGE_MAX_CHARS",
    "LOG_LEVELS",
    "LOG_LINES_PER_CALL_MAX",
    "LOG_SEQUENCE_MAX",
    "AttemptLog",
    "JobLogLine",
    "LogLine",
    "LogPosition",
    "clean_line",
]


@dataclass(frozen=True)
class JobLogLine:
    """One kept line: its lease (attempt and fencing token), its place in that lease's log, its content."""

    attempt: int
    fencing_token: FencingToken
    sequence: int
    line: LogLine


@dataclass(frozen=True)
class AttemptLog:
    """Lines of one running attempt on their way from the worker to the API, each with its sequence."""

    lease: LeaseRef
    lines: tuple[tuple[int, LogLine], ...]

    @property
    def job_id(self) -> JobId:
        return self.lease.job_id


@dataclass(frozen=True)
class LogPosition:
    """Where a page of a job's log ends: after this lease's line `sequence`."""

    fencing_token: int = 0
    sequence: int = 0
