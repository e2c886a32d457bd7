"""How much one page of a read may carry. A page is bounded by its count and by its bytes: jobs, events
and schedules carry text and bytes their tenant wrote (labels, errors, tracebacks, payloads), so a
count alone let a page of 500 grow past gRPC's 4 MiB message, which no client could then read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from shared.domain.job_logs import JobLogLine
from shared.domain.jobs import Job, JobError, JobEvent, JobPage, PageCursor
from shared.domain.schedules import Schedule

T = TypeVar("T")

# What one page may carry, by the estimates below: a quarter of gRPC's default 4 MiB message, so that
# the estimates' slack and the encoding's own bytes stay far inside it.
PAGE_BYTES_MAX = 1024 * 1024
# Per field: its tag and length prefix, generously.
_FIELD_BYTES = 8
# A job's or an event's ids, numbers, enums and timestamps together.
_FIXED_BYTES = 256


def text_bytes(*texts: str | bytes | None) -> int:
    """What these fields take encoded, each with its tag and length."""
    return sum(len(t.encode() if isinstance(t, str) else t) + _FIELD_BYTES for t in texts if t)


def _error_bytes(error: JobError | None) -> int:
    return text_bytes(error.message, error.traceback) if error else 0


def job_bytes(job: Job) -> int:
    """An upper estimate of a job's size in a page of jobs."""
    labels = sum(text_bytes(key, value) + _FIELD_BYTES for key, value in job.labels.items())
    related = text_bytes(*job.depends_on, job.kind, job.resource_key, job.idempotency_key, job.tenant)
    return _FIXED_BYTES + labels + related + _error_bytes(job.last_error)


def event_bytes(event: JobEvent) -> int:
    """An upper estimate of an event's size in a page of a job's history."""
    return _FIXED_BYTES + text_bytes(event.actor, event.reason) + _error_bytes(event.error)


def log_line_bytes(line: JobLogLine) -> int:
    """An upper estimate of a handler's log line in a page of a job's log."""
    return _FIXED_BYTES + text_bytes(line.line.level, line.line.logger, line.line.message)


def schedule_bytes(schedule: Schedule) -> int:
    """An upper estimate of a schedule's size in a page of schedules: its template carries a payload."""
    template = schedule.template
    labels = sum(text_bytes(key, value) + _FIELD_BYTES for key, value in template.labels.items())
    texts = (schedule.schedule_id, schedule.spec.cron, schedule.spec.time_zone, schedule.note, schedule.last_error)
    return _FIXED_BYTES + labels + text_bytes(template.kind, template.payload, *template.limit_keys, *texts)


def fitting(items: Sequence[T], size_of: Callable[[T], int], max_bytes: int = PAGE_BYTES_MAX) -> int:
    """How many of `items`, from the first, fit in `max_bytes`; at least one, so every page moves on."""
    total = 0
    for count, item in enumerate(items):
        total += size_of(item)
        if total > max_bytes and count > 0:
            return count
    return len(items)


def job_page(jobs: list[Job], page_size: int) -> JobPage:
    """A page from `jobs` (read as page_size + 1, newest first): at most page_size of them and at most
    PAGE_BYTES_MAX, with the cursor after its last when any were left for the next page."""
    kept = jobs[: fitting(jobs[:page_size], job_bytes)]
    if len(kept) == len(jobs):
        return JobPage(kept, None)
    last = kept[-1]
    return JobPage(kept, PageCursor(last.created_at, last.job_id))
