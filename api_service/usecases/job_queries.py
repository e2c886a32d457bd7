"""Reading a tenant's jobs and results. Another tenant's job is indistinguishable from no job.

Results are answered through this replica's ResultCache: a stored result never changes, so it is kept by
(tenant, job id); a latest result is kept by (tenant, resource key, version), the version read afresh for
every request. The tenant comes from the credential, so one tenant's entry is never another's."""

from __future__ import annotations

from dataclasses import replace

from api_service.result_cache import ResultCache, ResultCacheLimits
from shared.domain.errors import FailedPrecondition, FieldViolation, InvalidArgument, NotFound, ViolationCollector
from shared.domain.ids import JobId, TenantId
from shared.domain.job_logs import JobLogLine, LogPosition
from shared.domain.jobs import Job, JobEvent, JobPage, JobResult, JobState, ListFilter, PageCursor
from shared.domain.paging import event_bytes, fitting, log_line_bytes
from shared.domain.submission_rules import SubmissionLimits, check_job_id, check_text, is_job_id
from shared.storage import checkpoint_store, job_store, log_store, progress_store, scheduling_store
from shared.storage.database import Database

PAGE_SIZE_DEFAULT = 50
_MAY_BE_HELD = frozenset({JobState.PENDING, JobState.RETRY_WAIT})
PAGE_SIZE_MAX = 500
LOG_PAGE_SIZE_DEFAULT = 200
LOG_PAGE_SIZE_MAX = 1000
# What an entry costs beyond its payload: the key, the result (and job) records, the cache's own links.
# Measured with tracemalloc: about 0.6 KiB for a job's result, 1.2 KiB for a latest result with its job.
ENTRY_OVERHEAD_BYTES = 2048


def _result_bytes(result: JobResult) -> int:
    return len(result.payload) + ENTRY_OVERHEAD_BYTES


# A stored result, with the resource key and version of its job (None without a resource).
_KeptResult = tuple[JobResult, tuple[str, int] | None]


def _kept_result_bytes(kept: _KeptResult) -> int:
    return _result_bytes(kept[0]) + (len(kept[1][0]) if kept[1] else 0)


def _latest_bytes(answer: tuple[Job, JobResult]) -> int:
    job, result = answer
    return _result_bytes(result) + sum(len(k) + len(v) for k, v in job.labels.items())


class JobQueries:
    def __init__(self, db: Database, results: ResultCache | None = None) -> None:
        self._db = db
        self._results = results or ResultCache(ResultCacheLimits())

    async def get_job(self, tenant: TenantId, job_id: JobId) -> Job:
        """With its latest progress and its checkpointed stages."""
        check_job_id(job_id)
        async with self._db.transaction(tenant) as conn:
            job = await job_store.get_job(conn, tenant, job_id)
            if job is None:
                raise NotFound()
            progress = await progress_store.get(conn, tenant, job_id)
            checkpoints = await checkpoint_store.list_for_job(conn, tenant, job_id)
            waiting = await scheduling_store.waiting_reason(conn, tenant, job_id) if job.state in _MAY_BE_HELD else None
        return replace(job, progress=progress, checkpoints=checkpoints, waiting=waiting)

    async def get_result(self, tenant: TenantId, job_id: JobId) -> JobResult:
        """Only a stored result is cached; "no such job" and "not ready yet" are read every time. A kept
        result of a job with a resource is answered only after a fresh read of the key's tombstone: a
        deletion on any replica hides it at once."""
        check_job_id(job_id)
        result, resource = await self._results.get(
            ("job", tenant, job_id),
            lambda: self._read_result(tenant, job_id),
            size_of=_kept_result_bytes,
            read="job_result",
        )
        if resource is not None:
            _, deleted_version = await self._fresh_head(tenant, resource[0])
            if resource[1] <= deleted_version:
                raise NotFound("the job's resource was deleted")
        return result

    async def _read_result(self, tenant: TenantId, job_id: JobId) -> _KeptResult:
        async with self._db.transaction(tenant) as conn:
            found = await job_store.get_result_and_resource(conn, tenant, job_id)
        if found is None:
            raise NotFound()
        state, result, resource_key, resource_version = found
        if result is None:
            raise FailedPrecondition(
                f"the job has no result: it is {state.value}",
                reason="RESULT_NOT_READY" if not state.is_terminal else "NO_RESULT",
                metadata={"state": state.value},
            )
        return result, (resource_key, resource_version or 0) if resource_key else None

    async def list_jobs(
        self, tenant: TenantId, filters: ListFilter, after: PageCursor | None, page_size: int
    ) -> JobPage:
        if page_size < 0 or page_size > PAGE_SIZE_MAX:
            raise InvalidArgument(FieldViolation("page_size", f"must be between 0 and {PAGE_SIZE_MAX}"))
        violations = ViolationCollector()
        for name, value in (("kind", filters.kind), ("resource_key", filters.resource_key)):
            if value is not None:
                check_text(violations, name, value, 512)
        if len(filters.labels) > SubmissionLimits().max_labels:
            violations.add("labels", f"must have at most {SubmissionLimits().max_labels} entries")
        for key, value in filters.labels.items():
            check_text(violations, f"labels[{key[:64]!r}]", key + value, 512)
        if filters.parent_job_id is not None and not is_job_id(filters.parent_job_id):
            violations.add("parent_job_id", "must be a job id")
        if filters.sequence_key is not None:
            check_text(violations, "sequence_key", filters.sequence_key, SubmissionLimits().max_job_key_chars)
            if after is not None and after.sequence_place is None:
                violations.add("page_token", "is from a listing without sequence_key: pass the same filters")
        elif after is not None and after.sequence_place is not None:
            violations.add("page_token", "is from a listing with sequence_key: pass the same filters")
        violations.raise_if_any()
        async with self._db.transaction(tenant) as conn:
            return await job_store.list_jobs(conn, tenant, filters, after, page_size or PAGE_SIZE_DEFAULT)

    async def latest_result(self, tenant: TenantId, resource_key: str) -> tuple[Job, JobResult]:
        """The result of the highest version submitted for the key, only if that version succeeded.
        The version is read after the call began, and the answer is looked up under that version only."""
        violations = ViolationCollector()
        if not resource_key:
            violations.add("resource_key", "is required")
        check_text(violations, "resource_key", resource_key, SubmissionLimits().max_resource_key_chars)
        violations.raise_if_any()
        version, deleted_version = await self._fresh_head(tenant, resource_key)
        if version <= deleted_version:
            raise NotFound("this resource key was deleted")
        return await self._results.get(
            ("version", tenant, resource_key, version),
            lambda: self._read_version_result(tenant, resource_key, version),
            size_of=_latest_bytes,
            read="latest_result",
        )

    async def _fresh_head(self, tenant: TenantId, resource_key: str) -> tuple[int, int]:
        """The key's highest submitted and highest deleted version, read after this call began."""
        return await self._results.read_fresh(
            ("head", tenant, resource_key), lambda: self._read_head(tenant, resource_key), read="resource_head"
        )

    async def _read_head(self, tenant: TenantId, resource_key: str) -> tuple[int, int]:
        async with self._db.transaction(tenant) as conn:
            head = await job_store.resource_head_and_tombstone(conn, tenant, resource_key)
        if head is None:
            raise NotFound("no job was submitted for this resource key")
        return head

    async def _read_version_result(self, tenant: TenantId, resource_key: str, version: int) -> tuple[Job, JobResult]:
        async with self._db.transaction(tenant) as conn:
            found = await job_store.result_for_version(conn, tenant, resource_key, version)
        if found is None:
            raise NotFound("no job was submitted for this resource key")
        job, result = found
        if result is None:
            raise FailedPrecondition(
                f"version {version} has no result yet: its job is {job.state.value}",
                reason="RESULT_NOT_READY",
                metadata={"resource_version": str(version), "state": job.state.value, "job_id": job.job_id},
            )
        return job, result

    async def list_events(
        self, tenant: TenantId, job_id: JobId, after_sequence: int, page_size: int
    ) -> tuple[list[JobEvent], int | None]:
        """A page of the job's transitions, and the sequence to continue after (None on the last page)."""
        check_job_id(job_id)
        if page_size < 0 or page_size > PAGE_SIZE_MAX:
            raise InvalidArgument(FieldViolation("page_size", f"must be between 0 and {PAGE_SIZE_MAX}"))
        limit = page_size or PAGE_SIZE_DEFAULT
        async with self._db.transaction(tenant) as conn:
            events = await job_store.list_events(conn, tenant, job_id, after_sequence=after_sequence, limit=limit + 1)
            if not events and await job_store.get_job(conn, tenant, job_id) is None:
                raise NotFound()
        kept = events[: fitting(events[:limit], event_bytes)]
        if len(kept) == len(events):
            return kept, None
        return kept, kept[-1].sequence

    async def list_logs(
        self, tenant: TenantId, job_id: JobId, attempt: int, after: LogPosition, page_size: int
    ) -> tuple[list[JobLogLine], LogPosition | None]:
        """A page of what the job's handlers logged, and where the next page starts (None on the last)."""
        check_job_id(job_id)
        if page_size < 0 or page_size > LOG_PAGE_SIZE_MAX:
            raise InvalidArgument(FieldViolation("page_size", f"must be between 0 and {LOG_PAGE_SIZE_MAX}"))
        if attempt < 0:
            raise InvalidArgument(FieldViolation("attempt", "must be 0 (every attempt) or an attempt number"))
        limit = page_size or LOG_PAGE_SIZE_DEFAULT
        async with self._db.transaction(tenant) as conn:
            lines = await log_store.list_lines(conn, tenant, job_id, attempt=attempt, after=after, limit=limit + 1)
            if not lines and await job_store.get_job(conn, tenant, job_id) is None:
                raise NotFound()
        kept = lines[: fitting(lines[:limit], log_line_bytes)]
        if len(kept) == len(lines):
            return kept, None
        last = kept[-1]
        return kept, LogPosition(last.fencing_token, last.sequence)
