"""Operators' view of jobs across tenants: search, any tenant's job and history, and bulk cancel or retry.

Transport-free, for the gRPC AdminService and a console alike: domain types in and out, the acting
operator and the reason passed explicitly.

Tenant walls. A tenant's transaction sets its tenant (Database.transaction(tenant)) and row-level
security confines it to that tenant's rows whatever its SQL says. These reads set no tenant, which is
the database's cross-tenant path; only AdminService, which admits admin principals alone, reaches them.
A filter naming a tenant scopes the transaction to that tenant as well, so the wall, not only the WHERE
clause, keeps other tenants out.

Bulk actions. Each job goes through the very rule its tenant's CancelJob or RetryJob applies
(lifecycle.cancel_in / retry_in), in its tenant's scope, and gets the same history entry, with the
operator as actor. Jobs are taken BULK_BATCH_SIZE per transaction: one transaction per job would cost a
commit each (100,000 commits), and one for all would hold every row lock until the end, stalling the
workers that report on those jobs. A batch holds its rows for well under a second; a failure leaves the
batches before it done (each job's history says so) and the rest untouched, and the request can simply
be repeated: jobs already cancelled or reopened no longer match."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict

from api_service.usecases.job_queries import PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX, JobQueries
from api_service.usecases.lifecycle import cancel_in, retry_in
from shared.domain.admin import Actor, BulkOutcome, BulkRequest, BulkSkip, JobFilter, check_bulk, check_filter
from shared.domain.errors import FailedPrecondition, NotFound, ViolationCollector
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Job, JobEvent, JobPage, JobState, PageCursor
from shared.domain.submission_rules import check_job_id
from shared.storage import admin_store
from shared.storage.database import Connection, Database, set_tenant

log = logging.getLogger(__name__)
BULK_BATCH_SIZE = 500
# A dry run counts at most this many; a filter that matches more must be narrowed first.
BULK_MATCH_MAX = 1_000_000
# How many skipped jobs a bulk outcome lists (skipped_count counts them all).
BULK_SKIPS_LISTED = 100
CANCELLABLE_STATES = frozenset(
    {JobState.PENDING, JobState.BLOCKED, JobState.RETRY_WAIT, JobState.RUNNING, JobState.OUTCOME_UNKNOWN}
)
RETRYABLE_STATES = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.OUTCOME_UNKNOWN})

# One job's change inside a batch's transaction, already scoped to the job's tenant.
JobAction = Callable[[Connection, TenantId, JobId], Awaitable[Job]]


class AdminJobs:
    def __init__(self, db: Database, queries: JobQueries, *, batch_size: int = BULK_BATCH_SIZE) -> None:
        self._db = db
        self._queries = queries
        self._batch_size = batch_size

    async def search(self, job_filter: JobFilter, after: PageCursor | None, page_size: int) -> JobPage:
        """Matching jobs of every tenant (or the filter's tenant), newest first, paginated."""
        violations = ViolationCollector()
        check_filter(violations, job_filter)
        if not 0 <= page_size <= PAGE_SIZE_MAX:
            violations.add("page_size", f"must be between 0 and {PAGE_SIZE_MAX}")
        violations.raise_if_any()
        async with self._db.transaction(job_filter.tenant) as conn:
            return await admin_store.search_jobs(conn, job_filter, after, page_size or PAGE_SIZE_DEFAULT)

    async def get_job(self, job_id: JobId) -> Job:
        """Any tenant's job (Job.tenant says whose)."""
        return await self._queries.get_job(await self._tenant_of(job_id), job_id)

    async def list_events(
        self, job_id: JobId, after_sequence: int, page_size: int
    ) -> tuple[list[JobEvent], int | None]:
        """Any tenant's job history, as JobService.ListJobEvents pages it."""
        return await self._queries.list_events(await self._tenant_of(job_id), job_id, after_sequence, page_size)

    async def cancel_jobs(self, actor: Actor, request: BulkRequest) -> BulkOutcome:
        """Cancels the unfinished jobs the filter matches, as CancelJob would each one."""

        async def cancel(conn: Connection, tenant: TenantId, job_id: JobId) -> Job:
            return await cancel_in(conn, tenant, actor.name, job_id, request.reason)

        return await self._bulk(actor, "cancel_jobs", request, CANCELLABLE_STATES, cancel)

    async def retry_jobs(self, actor: Actor, request: BulkRequest) -> BulkOutcome:
        """Reopens the failed, cancelled and outcome-unknown jobs the filter matches, as RetryJob would;
        jobs whose outcome is unknown are skipped unless request.accept_duplicate_risk."""

        async def retry(conn: Connection, tenant: TenantId, job_id: JobId) -> Job:
            return await retry_in(
                conn, tenant, actor.name, job_id, request.reason, accept_duplicate_risk=request.accept_duplicate_risk
            )

        return await self._bulk(actor, "retry_jobs", request, RETRYABLE_STATES, retry)

    async def _tenant_of(self, job_id: JobId) -> TenantId:
        check_job_id(job_id)
        async with self._db.transaction() as conn:
            tenant = await admin_store.job_tenant(conn, job_id)
        if tenant is None:
            raise NotFound()
        return tenant

    async def _bulk(
        self, actor: Actor, action: str, request: BulkRequest, states: frozenset[JobState], change: JobAction
    ) -> BulkOutcome:
        violations = ViolationCollector()
        check_bulk(violations, request)
        violations.raise_if_any()
        bound = BULK_MATCH_MAX if request.dry_run else request.expected_count
        async with self._db.transaction(request.filter.tenant) as conn:
            matched = await admin_store.match_jobs(conn, request.filter, states, limit=bound + 1)
        if len(matched) > bound:
            raise _too_many(request, bound)
        if request.dry_run:
            return BulkOutcome(len(matched), 0, (), 0, dry_run=True)
        details = {"filter": _filter_details(request.filter), "expected_count": request.expected_count}
        changed, skips = 0, []
        for start in range(0, len(matched), self._batch_size):
            batch = matched[start : start + self._batch_size]
            async with self._db.transaction() as conn:
                if start == 0:
                    # With the first batch's changes, so the record exists whenever a change does.
                    details["matched"] = len(matched)
                    await admin_store.record_action(
                        conn, actor=actor.name, action=action, target="jobs", reason=request.reason, details=details
                    )
                done, skipped = await _apply(conn, batch, change)
            changed += done
            skips += skipped
        log.info(
            action, extra={"actor": actor.name, "reason": request.reason, "changed": changed, "skipped": len(skips)}
        )
        return BulkOutcome(len(matched), changed, tuple(skips[:BULK_SKIPS_LISTED]), len(skips), dry_run=False)


async def _apply(
    conn: Connection, batch: Sequence[tuple[JobId, TenantId]], change: JobAction
) -> tuple[int, list[BulkSkip]]:
    """Applies the change to each job in its tenant's scope (switched only when the tenant changes);
    a job the rule refuses is skipped, having changed nothing, and the batch goes on."""
    changed, skips, scoped = 0, [], None
    for job_id, tenant in sorted(batch, key=lambda item: item[1]):
        if tenant != scoped:
            await set_tenant(conn, tenant)
            scoped = tenant
        try:
            await change(conn, tenant, job_id)
            changed += 1
        except (FailedPrecondition, NotFound) as refusal:
            skips.append(BulkSkip(job_id, tenant, refusal.reason, refusal.message))
    return changed, skips


def _too_many(request: BulkRequest, bound: int) -> Exception:
    if request.dry_run:
        return FailedPrecondition(
            f"more than {bound} jobs match: narrow the filter", reason="TOO_MANY_JOBS", metadata={"max": str(bound)}
        )
    return FailedPrecondition(
        f"more than the expected {bound} jobs match now: nothing was changed; "
        "run a dry run again and confirm its count",
        reason="COUNT_EXCEEDED",
        metadata={"expected_count": str(bound)},
    )


def _filter_details(job_filter: JobFilter) -> dict[str, object]:
    """The filter as JSON for admin_actions."""
    raw = asdict(job_filter)
    raw["states"] = [s.value for s in job_filter.states]
    for name in ("created_after", "created_before"):
        raw[name] = raw[name].isoformat() if raw[name] else None
    return {k: v for k, v in raw.items() if v not in (None, (), [], {})}
