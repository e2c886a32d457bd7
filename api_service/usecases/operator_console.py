"""What the operator console reads across tenants, and its decisions about one job, which go through
the tenant's own lifecycle use-case so that an operator's cancel or retry is the same transition as the
tenant's, recorded with the operator's name and reason."""

from __future__ import annotations

import dataclasses

from api_service.usecases.lifecycle import JobLifecycle
from shared.domain.errors import NotFound
from shared.domain.ids import JobId, TenantId
from shared.domain.job_logs import LogPosition
from shared.domain.jobs import Job, JobState
from shared.domain.operator_views import JobDetail, QueueLine
from shared.domain.submission_rules import check_job_id
from shared.storage import (
    checkpoint_store,
    job_store,
    log_store,
    operator_store,
    progress_store,
    receipt_store,
    scheduling_store,
)
from shared.storage.database import Database

# How much of a payload or result the job page shows; the rest is there through GetJobResult.
PREVIEW_BYTES = 4096
# The job page shows this much of the history; a longer one says so.
EVENTS_SHOWN_MAX = 500
# Dependents shown per page: a fan-in's source may have tens of thousands (20,000 made a 4.7 MB page).
DEPENDENTS_PAGE_SIZE = 100
# Children shown per page: a parent may have spawned up to 1,000.
CHILDREN_PAGE_SIZE = 100
_MAY_BE_HELD = frozenset({JobState.PENDING, JobState.RETRY_WAIT})
# The page shows the start of a long handler log; `jobsctl logs` reads all of it.
LOG_LINES_SHOWN_MAX = 500
FAILED_WINDOW_SECONDS_DEFAULT = 3600.0


class OperatorReads:
    def __init__(self, db: Database, *, failed_window_seconds: float = FAILED_WINDOW_SECONDS_DEFAULT) -> None:
        self._db = db
        self._failed_window_seconds = failed_window_seconds

    async def queues(self) -> list[QueueLine]:
        async with self._db.transaction() as conn:
            return await operator_store.queue_overview(conn, failed_window_seconds=self._failed_window_seconds)

    async def job(
        self, job_id: JobId, *, dependents_after: JobId | None = None, children_after: JobId | None = None
    ) -> JobDetail:
        """The job with its history (each failed attempt's error), receipts, dependencies and a page of
        its dependents, a page of the jobs it spawned, stage checkpoints, latest progress, handler log,
        and why it waits if it is held back."""
        check_job_id(job_id)
        for name, after in (("dependents_after", dependents_after), ("children_after", children_after)):
            if after is not None:
                check_job_id(after, name)
        async with self._db.transaction() as conn:
            detail = await operator_store.get_job_detail(conn, job_id, preview_bytes=PREVIEW_BYTES)
            if detail is None:
                raise NotFound()
            job = detail.job
            events = await job_store.list_events(conn, job.tenant, job_id, after_sequence=0, limit=EVENTS_SHOWN_MAX)
            receipts = await receipt_store.list_receipts(conn, job_id)
            dependencies = await operator_store.dependencies(conn, job.depends_on)
            dependents = await operator_store.dependents_page(
                conn, job_id, after=dependents_after, limit=DEPENDENTS_PAGE_SIZE + 1
            )
            children = await operator_store.children_page(
                conn, job_id, after=children_after, limit=CHILDREN_PAGE_SIZE + 1
            )
            checkpoints = await checkpoint_store.list_for_job(conn, job.tenant, job_id)
            progress = await progress_store.get(conn, job.tenant, job_id)
            held = job.state in _MAY_BE_HELD
            waiting = await scheduling_store.waiting_reason(conn, job.tenant, job_id) if held else None
            logs = await log_store.list_lines(
                conn, job.tenant, job_id, attempt=0, after=LogPosition(), limit=LOG_LINES_SHOWN_MAX
            )
        more = len(dependents) > DEPENDENTS_PAGE_SIZE
        shown = dependents[:DEPENDENTS_PAGE_SIZE]
        return dataclasses.replace(
            detail,
            job=dataclasses.replace(job, waiting=waiting),
            events=events,
            receipts=receipts,
            dependencies=dependencies,
            dependents=shown,
            dependents_after=dependents_after,
            more_dependents_after=shown[-1].job_id if more else None,
            checkpoints=checkpoints,
            progress=progress,
            logs=tuple(logs),
            children=tuple(children[:CHILDREN_PAGE_SIZE]),
            children_after=children_after,
            more_children_after=children[CHILDREN_PAGE_SIZE - 1].job_id if len(children) > CHILDREN_PAGE_SIZE else None,
        )


class OperatorJobActions:
    """Cancel and retry of any tenant's job; the caller has checked that the operator may change things."""

    def __init__(self, db: Database, lifecycle: JobLifecycle) -> None:
        self._db = db
        self._lifecycle = lifecycle

    async def cancel(self, actor: str, job_id: JobId, reason: str) -> Job:
        return await self._lifecycle.cancel(await self._tenant_of(job_id), actor, job_id, reason)

    async def retry(
        self, actor: str, job_id: JobId, reason: str, *, accept_duplicate_risk: bool, clear_checkpoints: bool = False
    ) -> Job:
        tenant = await self._tenant_of(job_id)
        return await self._lifecycle.retry(
            tenant,
            actor,
            job_id,
            reason,
            accept_duplicate_risk=accept_duplicate_risk,
            clear_checkpoints=clear_checkpoints,
        )

    async def _tenant_of(self, job_id: JobId) -> TenantId:
        check_job_id(job_id)
        async with self._db.transaction() as conn:
            detail = await operator_store.get_job_detail(conn, job_id, preview_bytes=0)
        if detail is None:
            raise NotFound()
        return detail.job.tenant
