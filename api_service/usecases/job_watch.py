"""WatchJob: a job's transitions as they happen, from the recorded history, without holding a
database connection between reads."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Protocol

from shared.domain.checkpoints import Progress
from shared.domain.errors import FieldViolation, InvalidArgument, NotFound, ResourceExhausted
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Job, JobEvent
from shared.domain.submission_rules import check_job_id
from shared.pause import wait_at_most
from shared.storage import job_store, progress_store
from shared.storage.database import Database

EVENTS_PER_READ = 100
# Re-read even without a notification, in case one was lost with a dropped LISTEN connection.
RECHECK_SECONDS_DEFAULT = 15.0
# Open streams per API process; each costs a task and an event, and a database read per change.
STREAMS_MAX_DEFAULT = 500
# Open streams of one tenant per API process: a fifth of the process's, so that one tenant opening
# streams without end leaves the others room on every replica.
STREAMS_PER_TENANT_MAX_DEFAULT = 100
STREAM_RETRY_AFTER_SECONDS = 5.0


class ChangeSignals(Protocol):
    def subscribe(self, job_id: JobId) -> AbstractAsyncContextManager[asyncio.Event]: ...


def job_at(job: Job, event: JobEvent) -> Job:
    """The job as of one transition: state, sequence, attempt and token are the event's; the other
    fields are the job's current values."""
    return replace(
        job, state=event.to_state, sequence=event.sequence, attempts=event.attempt, fencing_token=event.fencing_token
    )


class JobWatch:
    def __init__(
        self,
        db: Database,
        signals: ChangeSignals,
        recheck_seconds: float = RECHECK_SECONDS_DEFAULT,
        *,
        max_streams: int = STREAMS_MAX_DEFAULT,
        max_streams_per_tenant: int = STREAMS_PER_TENANT_MAX_DEFAULT,
    ):
        self._db = db
        self._signals = signals
        self._recheck_seconds = recheck_seconds
        self._max_streams = max_streams
        self._max_per_tenant = max_streams_per_tenant
        self._open_streams = 0
        self._open_by_tenant: Counter[TenantId] = Counter()

    async def watch(
        self, tenant: TenantId, job_id: JobId, after_sequence: int, *, include_progress: bool = False
    ) -> AsyncIterator[Job]:
        """From `after_sequence` on (0: the current state first); ends once the job's latest state is
        terminal and has been sent. With `include_progress` every message carries the job's progress,
        and a progress change alone sends the job again under the latest sequence sent: progress does
        not raise the sequence, which stays the resume point for transitions."""
        check_job_id(job_id)
        if after_sequence < 0:
            raise InvalidArgument(FieldViolation("after_sequence", "must not be negative"))
        if self._open_by_tenant[tenant] >= self._max_per_tenant:
            raise ResourceExhausted(
                f"this tenant has {self._max_per_tenant} WatchJob streams open on this server already",
                retry_after_seconds=STREAM_RETRY_AFTER_SECONDS,
            )
        if self._open_streams >= self._max_streams:
            raise ResourceExhausted(
                f"this server has {self._max_streams} WatchJob streams open already",
                retry_after_seconds=STREAM_RETRY_AFTER_SECONDS,
            )
        self._open_streams += 1
        self._open_by_tenant[tenant] += 1
        try:
            async for job in self._follow(tenant, job_id, after_sequence, include_progress):
                yield job
        finally:
            self._open_streams -= 1
            self._open_by_tenant[tenant] -= 1
            if not self._open_by_tenant[tenant]:
                del self._open_by_tenant[tenant]

    async def _follow(
        self, tenant: TenantId, job_id: JobId, after_sequence: int, include_progress: bool
    ) -> AsyncIterator[Job]:
        async with self._signals.subscribe(job_id) as changed:
            job = await self._current(tenant, job_id, include_progress)
            last = after_sequence
            shown: Progress | None = None
            if after_sequence == 0:
                yield job
                last, shown = job.sequence, job.progress
            while not (job.state.is_terminal and last >= job.sequence):
                changed.clear()
                events, job = await self._events_after(tenant, job_id, last, include_progress)
                for event in events:
                    yield job_at(job, event)
                    last, shown = event.sequence, job.progress
                if not events and job.progress != shown and job.sequence == last:
                    yield job  # a progress change alone: the latest transition's sequence again
                    shown = job.progress
                if len(events) == EVENTS_PER_READ or (job.state.is_terminal and last >= job.sequence):
                    continue
                await wait_at_most(changed, self._recheck_seconds)

    async def _current(self, tenant: TenantId, job_id: JobId, include_progress: bool) -> Job:
        async with self._db.transaction(tenant) as conn:
            job = await job_store.get_job(conn, tenant, job_id)
            if job is not None and include_progress:
                job = replace(job, progress=await progress_store.get(conn, tenant, job_id))
        if job is None:
            raise NotFound()
        return job

    async def _events_after(
        self, tenant: TenantId, job_id: JobId, sequence: int, include_progress: bool
    ) -> tuple[list[JobEvent], Job]:
        async with self._db.transaction(tenant) as conn:
            job = await job_store.get_job(conn, tenant, job_id)
            events = await job_store.list_events(conn, tenant, job_id, after_sequence=sequence, limit=EVENTS_PER_READ)
            if job is not None and include_progress:
                job = replace(job, progress=await progress_store.get(conn, tenant, job_id))
        if job is None:
            raise NotFound()
        return [e for e in events if e.sequence <= job.sequence], job
