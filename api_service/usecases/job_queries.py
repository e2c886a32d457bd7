"""Reading a tenant's jobs and results. Another tenant's job is indistinguishable from no job."""

from __future__ import annotations

from shared.domain.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import Job, JobPage, JobResult, JobState, ListFilter, PageCursor
from shared.domain.submission_rules import check_job_id, check_text
from shared.domain.errors import ViolationCollector
from shared.storage import job_store
from shared.storage.database import Database

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 500


class JobQueries:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_job(self, tenant: TenantId, job_id: JobId) -> Job:
        check_job_id(job_id)
        async with self._db.transaction() as conn:
            job = await job_store.get_job(conn, tenant, job_id)
        if job is None:
            raise NotFound()
        return job

    async def get_result(self, tenant: TenantId, job_id: JobId) -> JobResult:
        check_job_id(job_id)
        async with self._db.transaction() as conn:
            found = await job_store.get_result(conn, tenant, job_id)
        if found is None:
            raise NotFound()
        state, result = found
        if result is None:
            raise FailedPrecondition(
                f"the job has no result: it is {state.value}",
                reason="RESULT_NOT_READY" if not state.is_terminal else "NO_RESULT",
                metadata={"state": state.value},
            )
        return result

    async def list_jobs(
        self, tenant: TenantId, filters: ListFilter, after: PageCursor | None, page_size: int
    ) -> JobPage:
        if page_size < 0 or page_size > PAGE_SIZE_MAX:
            raise InvalidArgument(FieldViolation("page_size", f"must be between 0 and {PAGE_SIZE_MAX}"))
        violations = ViolationCollector()
        for name, value in (("kind", filters.kind), ("resource_key", filters.resource_key)):
            if value is not None:
                check_text(violations, name, value, 512)
        for key, value in filters.labels.items():
            check_text(violations, f"labels[{key[:64]!r}]", key + value, 512)
        violations.raise_if_any()
        async with self._db.transaction() as conn:
            return await job_store.list_jobs(conn, tenant, filters, after, page_size or PAGE_SIZE_DEFAULT)


__all__ = ["JobQueries", "JobState"]
