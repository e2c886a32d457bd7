"""Stage checkpoints and progress of a running attempt: their records and bounds.

A checkpoint says that a stage of the job is done and its output durable; it holds a small record (a
pointer to that output, a count, a hash), not the output itself. Progress is informational: the latest
value wins, and nothing decides on it. The records a handler sees, and their bounds, are the SDK's
(durable_jobs.records); the service holds handlers to the same ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from durable_jobs.records import (
    CHECKPOINT_DATA_MAX_BYTES,
    CHECKPOINTS_PER_JOB_MAX,
    PROGRESS_MESSAGE_MAX_CHARS,
    STAGE_MAX_CHARS,
    Checkpoint,
    clean_progress_message,
    data_problem,
    encode_checkpoint_data,
    fraction_problem,
    stage_problem,
)
from shared.domain.ids import JobId
from shared.domain.jobs import LeaseRef

__all__ = [
    "CHECKPOINT_DATA_MAX_BYTES",
    "CHECKPOINTS_PER_JOB_MAX",
    "PROGRESS_MESSAGE_MAX_CHARS",
    "STAGE_MAX_CHARS",
    "Checkpoint",
    "Progress",
    "ProgressReport",
    "clean_progress_message",
    "data_problem",
    "encode_checkpoint_data",
    "fraction_problem",
    "stage_problem",
]


@dataclass(frozen=True)
class Progress:
    """The latest progress an attempt reported for its job."""

    fraction: float
    message: str
    attempt: int
    updated_at: datetime


@dataclass(frozen=True)
class ProgressReport:
    """One attempt's latest progress, on its way from the worker to the API."""

    lease: LeaseRef
    fraction: float
    message: str

    @property
    def job_id(self) -> JobId:
        return self.lease.job_id
