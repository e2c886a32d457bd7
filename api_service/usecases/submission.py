"""Submitting jobs: validation, defaults per kind, idempotency, versions and dependencies.
Answers only after COMMIT."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from api_service.metrics import SubmissionMetrics
from api_service.usecases.group_commit import GroupCommitter
from api_service.usecases.kind_catalog import KindCatalog
from shared.domain.errors import (
    AlreadyExists,
    FieldViolation,
    InvalidArgument,
    JobsError,
    ResourceDeleted,
    Unavailable,
)
from shared.domain.idempotency import input_digest, request_digest
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import ChildJob, ErrorCategory, Job, JobError, JobState, NewJob, PlainBatch, SubmitOutcome
from shared.domain.limit_keys import scope_submission_keys
from shared.domain.submission_rules import (
    DEDUPE_WINDOW_SECONDS_DEFAULT,
    SubmissionLimits,
    plain_batch_passes,
    validate_new_job,
)
from shared.json_logging import job_fields
from shared.storage import job_store, scheduling_store
from shared.storage.database import Connection, Database, set_tenant

log = logging.getLogger(__name__)
T = TypeVar("T")
_Request = tuple[TenantId, str, NewJob]
_Submitted = tuple[SubmitOutcome, list[JobId]]
_ENDED_BADLY = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED})


class SubmissionService:
    def __init__(
        self,
        db: Database,
        kinds: KindCatalog,
        limits: SubmissionLimits,
        *,
        dedupe_window_seconds: float = DEDUPE_WINDOW_SECONDS_DEFAULT,
        metrics: SubmissionMetrics | None = None,
    ) -> None:
        self._db = db
        self._metrics = metrics or SubmissionMetrics()
        self._kinds = kinds
        self._limits = limits
        self._dedupe_window_seconds = dedupe_window_seconds
        self._group: GroupCommitter[_Request, _Submitted] = GroupCommitter(
            db, self._submit_group, committed=self._group_committed
        )

    async def submit(self, tenant: TenantId, actor: str, job: NewJob) -> SubmitOutcome:
        """Shares a transaction with concurrent submissions (group commit); answers after COMMIT."""
        known = await self._kinds.known(job.kind)
        validate_new_job(job, limits=self._limits, known_kinds=known.keys())
        outcome, _ = await self._group.run((tenant, actor, job))
        return outcome

    def _group_committed(self, requests: Sequence[_Request], results: Sequence[_Submitted | JobsError]) -> None:
        """Logs and counts a group's jobs once it committed, whether or not their callers still wait: a job
        committed after its caller gave up is a job submitted all the same."""
        committed = [
            (actor, result)
            for (_, actor, _), result in zip(requests, results, strict=True)
            if not isinstance(result, JobsError)
        ]
        for actor, result in committed:
            _log_committed(actor, [result])
        self._metrics.count_created([outcome for _, (outcome, _) in committed])

    async def submit_many(self, tenant: TenantId, actor: str, jobs: Sequence[NewJob]) -> list[SubmitOutcome]:
        """All or nothing: any invalid item or reused key rejects the batch and writes nothing."""
        plain = await self._check_batch(jobs)
        return await _outliving_its_caller(self._store_many(tenant, actor, jobs, plain))

    async def _store_many(
        self, tenant: TenantId, actor: str, jobs: Sequence[NewJob], plain: Sequence[int]
    ) -> list[SubmitOutcome]:
        async with self._db.transaction(tenant) as conn:
            inserted = (
                await job_store.insert_many(conn, tenant, actor, self._plain_inserts(jobs, plain)) if plain else []
            )
            submitted: dict[int, _Submitted] = {
                i: (SubmitOutcome(job, True), []) for i, job in zip(plain, inserted, strict=True)
            }
            submitted.update(await self._submit_rest(conn, tenant, actor, jobs, skip=plain))
        ordered = [submitted[i] for i in range(len(jobs))]
        _log_committed(actor, ordered)
        outcomes = [outcome for outcome, _ in ordered]
        self._metrics.count_created(outcomes)
        return outcomes

    async def submit_many_ids(self, tenant: TenantId, actor: str, jobs: Sequence[NewJob]) -> list[tuple[JobId, bool]]:
        """As submit_many, answering only each job's id and whether this call created it: the plain
        items' rows are inserted without being read back, the most a batch of them costs per job."""
        plain = await self._check_batch(jobs)
        return await _outliving_its_caller(self._store_many_ids(tenant, actor, jobs, plain))

    async def _store_many_ids(
        self, tenant: TenantId, actor: str, jobs: Sequence[NewJob], plain: Sequence[int]
    ) -> list[tuple[JobId, bool]]:
        async with self._db.transaction(tenant) as conn:
            ids = (
                await job_store.insert_many_ids(conn, tenant, actor, self._plain_inserts(jobs, plain)) if plain else []
            )
            rest = await self._submit_rest(conn, tenant, actor, jobs, skip=plain)
        _log_committed(actor, list(rest.values()))
        _log_created_plain(actor, tenant, [(job_id, jobs[i].kind) for i, job_id in zip(plain, ids, strict=True)])
        self._metrics.count_created([outcome for outcome, _ in rest.values()])
        self._metrics.count_created_kinds(tenant, [jobs[i].kind for i in plain])
        answers = {i: (job_id, True) for i, job_id in zip(plain, ids, strict=True)}
        answers.update((i, (outcome.job.job_id, outcome.created)) for i, (outcome, _) in rest.items())
        return [answers[i] for i in range(len(jobs))]

    async def submit_plain_ids(self, tenant: TenantId, actor: str, batch: PlainBatch) -> list[JobId]:
        """As submit_many_ids for a batch of plain submissions (all created), without a NewJob per item:
        validated column by column, and item by item only when that finds one that may be wrong."""
        await self._check_plain_batch(batch)
        return await _outliving_its_caller(self._store_plain_ids(tenant, actor, batch))

    async def _check_plain_batch(self, batch: PlainBatch) -> None:
        """The checks of _check_batch, in its order and with its errors."""
        if len(batch) > self._limits.max_batch_size:
            raise InvalidArgument(FieldViolation("jobs", f"must hold at most {self._limits.max_batch_size}"))
        known = await self._kinds.known(*set(batch.kinds))
        if not plain_batch_passes(batch, limits=self._limits, known_kinds=known.keys()):
            for index, job in enumerate(batch.new_jobs()):
                validate_new_job(job, limits=self._limits, known_kinds=known.keys(), prefix=f"jobs[{index}].")

    async def _store_plain_ids(self, tenant: TenantId, actor: str, batch: PlainBatch) -> list[JobId]:
        policies = {kind: self._kinds.policy(kind) for kind in set(batch.kinds)}
        async with self._db.transaction(tenant) as conn:
            ids = await job_store.insert_plain_ids(conn, tenant, actor, batch, policies)
        _log_created_plain(actor, tenant, zip(ids, batch.kinds, strict=True))
        self._metrics.count_created_kinds(tenant, batch.kinds)
        return ids

    async def _check_batch(self, jobs: Sequence[NewJob]) -> list[int]:
        """Validates a batch before anything is written; the indexes of its plain items."""
        if not jobs:
            raise InvalidArgument(FieldViolation("jobs", "must hold at least one submission"))
        if len(jobs) > self._limits.max_batch_size:
            raise InvalidArgument(FieldViolation("jobs", f"must hold at most {self._limits.max_batch_size}"))
        known = await self._kinds.known(*{job.kind for job in jobs})
        for index, job in enumerate(jobs):
            validate_new_job(job, limits=self._limits, known_kinds=known.keys(), prefix=f"jobs[{index}].")
        _check_keys_within_batch(jobs)
        return [i for i, job in enumerate(jobs) if _is_plain(job)]

    async def _submit_rest(
        self, conn: Connection, tenant: TenantId, actor: str, jobs: Sequence[NewJob], *, skip: Sequence[int]
    ) -> dict[int, _Submitted]:
        """The items that need lookups before their insert, one at a time in request order."""
        skipped = set(skip)
        return {
            index: await self._submit_one(conn, tenant, actor, job, f"jobs[{index}].")
            for index, job in enumerate(jobs)
            if index not in skipped
        }

    def _plain_inserts(self, jobs: Sequence[NewJob], indexes: Sequence[int]) -> list[job_store.PlainInsert]:
        return [self._plain_insert(jobs[i]) for i in indexes]

    async def _submit_group(self, conn: Connection, requests: Sequence[_Request]) -> list[_Submitted | JobsError]:
        """One group-commit transaction: plain submissions of one caller go in one statement each. The
        transaction carries several tenants' submissions; each runs scoped to its own tenant."""
        results: dict[int, _Submitted | JobsError] = {}
        plain: dict[tuple[TenantId, str], list[int]] = {}
        for index, (tenant, actor, new_job) in enumerate(requests):
            if _is_plain(new_job):
                plain.setdefault((tenant, actor), []).append(index)
        scope = _TenantScope(conn)
        for (tenant, actor), indexes in plain.items():
            await scope.enter(tenant)
            inserted = await job_store.insert_many(
                conn, tenant, actor, [self._plain_insert(requests[i][2]) for i in indexes]
            )
            for index, stored in zip(indexes, inserted, strict=True):
                results[index] = (SubmitOutcome(stored, True), [])
        # The keyed ones in the order of their keys' locks (stable: one key's submissions keep theirs), so
        # that two groups sharing keys take their locks in the same order.
        keyed_order = sorted(
            (index for index in range(len(requests)) if index not in results),
            key=lambda index: _lock_order(requests[index][0], requests[index][2]),
        )
        for index in keyed_order:
            tenant, actor, new_job = requests[index]
            await scope.enter(tenant)
            try:
                results[index] = await self._submit_one(conn, tenant, actor, new_job, "")
            except JobsError as error:
                results[index] = error
        return [results[index] for index in range(len(requests))]

    def _plain_insert(self, job: NewJob) -> job_store.PlainInsert:
        spec = self._kinds.policy(job.kind)
        return job_store.PlainInsert(
            job, job.max_attempts or spec.max_attempts, spec.backoff_base_seconds, spec.backoff_cap_seconds
        )

    @property
    def database(self) -> Database:
        return self._db

    async def validate(self, jobs: Sequence[tuple[str, NewJob]]) -> None:
        """Checks submissions against the limits and the kinds in force, each under its field prefix."""
        known = await self._kinds.known(*{job.kind for _, job in jobs})
        for prefix, job in jobs:
            validate_new_job(job, limits=self._limits, known_kinds=known.keys(), prefix=prefix)

    async def submit_in(
        self, conn: Connection, tenant: TenantId, actor: str, job: NewJob, prefix: str, *, fan_in_waits: bool = False
    ) -> SubmitOutcome:
        """One submission inside the caller's transaction (validated by the caller), as SubmitJobs stores it."""
        outcome, _ = await self._submit_one(conn, tenant, actor, job, prefix, fan_in_waits=fan_in_waits)
        return outcome

    async def spawn_in(self, conn: Connection, tenant: TenantId, parent: JobId, children: Sequence[ChildJob]) -> None:
        """A parent's children inside its completion's transaction (validated by the caller), with the ids
        its worker made: the plain ones in one statement, then the others in spawn order, so that each
        finds the siblings it depends on. A dependency that names no job of the tenant raises."""
        actor = f"job:{parent}"
        plain = [child for child in children if _is_plain(child.job)]
        if plain:
            inserts = [self._plain_insert(child.job) for child in plain]
            await job_store.insert_many(conn, tenant, actor, inserts, spawned=(parent, [c.job_id for c in plain]))
        for index, child in enumerate(children):
            if not _is_plain(child.job):
                await self._submit_one(
                    conn, tenant, actor, child.job, f"children[{index}].", child=(child.job_id, parent)
                )

    async def _submit_one(
        self,
        conn: Connection,
        tenant: TenantId,
        actor: str,
        job: NewJob,
        prefix: str,
        *,
        fan_in_waits: bool = False,
        child: tuple[JobId, JobId] | None = None,
    ) -> tuple[SubmitOutcome, list[JobId]]:
        """The outcome, and the older versions' jobs that this submission superseded. Locks in the
        order every path takes them: the input, the resource head, then the dependencies."""
        digest = request_digest(job) if job.idempotency_key is not None else None
        if job.idempotency_key is not None:
            existing = await job_store.get_by_idempotency_key(conn, tenant, job.idempotency_key)
            if existing is not None:
                return _replay(*existing, digest), []
        answered = await _singleton_or_debounced(conn, tenant, job)
        if answered is not None:
            return SubmitOutcome(answered, False), []
        dedupe_digest = input_digest(job) if job.dedupe_by_input else None
        if dedupe_digest is not None:
            await job_store.lock_input(conn, tenant, job, dedupe_digest)
        latest_version = 0
        if job.resource_key:
            latest_version, deleted_version = await job_store.lock_resource_head_and_tombstone(
                conn, tenant, job.resource_key
            )
            if (job.resource_version or 0) <= deleted_version:
                raise ResourceDeleted(
                    f"versions up to {deleted_version} of this resource were deleted; submit a higher version"
                )
        # Before the dependencies are share-locked: the end of a sequence's holder, which locks that job
        # first, may be one of them.
        sequence_held = False
        if job.sequence_key is not None:
            await job_store.lock_key(conn, "sequence", tenant, job.sequence_key)
            sequence_held = await job_store.hold_sequence(conn, tenant, job.sequence_key)
        # Checked on every path that stores or attaches, superseded or not: an id that names no job of
        # this tenant is refused the same way wherever the submission would end up.
        dependencies = await _dependency_states(conn, tenant, job, prefix) if job.depends_on else {}
        if dedupe_digest is not None:
            attached = await job_store.find_attachable(
                conn, tenant, job, dedupe_digest, window_seconds=self._dedupe_window_seconds
            )
            if attached is not None:
                return SubmitOutcome(attached, False), []
        spec = self._kinds.policy(job.kind)
        state, error, reason = JobState.PENDING, None, "submitted"
        if job.resource_key and (job.resource_version or 0) < latest_version:
            state, reason = JobState.SUPERSEDED, f"version {latest_version} was already submitted"
        elif job.depends_on:
            state, error = _state_after(job, dependencies)
            reason = error.message if error else reason
        params = job_store.InsertParams(
            tenant=tenant,
            actor=actor,
            max_attempts=job.max_attempts or spec.max_attempts,
            backoff_base_seconds=spec.backoff_base_seconds,
            backoff_cap_seconds=spec.backoff_cap_seconds,
            request_digest=digest,
            input_digest=dedupe_digest,
            state=state,
            error=error,
            reason=reason,
            waits_for_manual_retry=fan_in_waits,
            job_id=child[0] if child else None,
            parent_job_id=child[1] if child else None,
        )
        created = await job_store.insert_job(conn, job, params)
        if created is None:
            # A concurrent submission with the same key committed first.
            assert job.idempotency_key is not None
            existing = await job_store.get_by_idempotency_key(conn, tenant, job.idempotency_key)
            if existing is None:
                raise Unavailable("the idempotency key is being reused concurrently; try again")
            return _replay(*existing, digest), []
        await scheduling_store.set_limit_keys(
            conn, tenant, created.job_id, scope_submission_keys(tenant, job.limit_keys)
        )
        if job.sequence_key is not None:
            await job_store.join_sequence(conn, tenant, created.job_id, job.sequence_key, held=sequence_held)
            created = replace(created, sequence_key=job.sequence_key)
        superseded: list[JobId] = []
        if job.resource_key and (job.resource_version or 0) > latest_version:
            superseded = await job_store.advance_resource(
                conn,
                tenant=tenant,
                resource_key=job.resource_key,
                resource_version=job.resource_version or 0,
                actor=actor,
            )
        return SubmitOutcome(created, True), superseded


async def _singleton_or_debounced(conn: Connection, tenant: TenantId, job: NewJob) -> Job | None:
    """The job a singleton or debounced submission answers with instead of a new one: the key's active
    singleton, or its open debounced job given this payload. Under the key's lock until commit, so racing
    submissions of one key agree on one job."""
    if job.singleton_key is not None:
        await job_store.lock_key(conn, "singleton", tenant, job.singleton_key)
        return await job_store.active_singleton(conn, tenant, job.singleton_key)
    if job.debounce is not None:
        await job_store.lock_key(conn, "debounce", tenant, job.debounce.key)
        return await job_store.collapse_debounced(conn, tenant, job)
    return None


def _lock_order(tenant: TenantId, job: NewJob) -> tuple[str, str, str, str]:
    """The first key lock a submission takes (singleton or debounce, then its sequence's), as a sort key."""
    first = job.singleton_key or (job.debounce.key if job.debounce else "")
    return (tenant, first, job.sequence_key or "", job.resource_key or "")


class _TenantScope:
    """Switches the transaction's tenant (row-level security) only when it changes."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._tenant: TenantId | None = None

    async def enter(self, tenant: TenantId) -> None:
        if tenant != self._tenant:
            await set_tenant(self._conn, tenant)
            self._tenant = tenant


async def _outliving_its_caller(storing: Coroutine[Any, Any, T]) -> T:
    """Runs `storing` (a transaction, then the lines and counts of what it committed) to its end even when
    the caller stops waiting: a batch committed as its caller gave up is logged like any other. The
    caller's deadline, in the context the task copies, still bounds the transaction."""
    task = asyncio.ensure_future(storing)
    # Read when nobody awaits it any more, so that asyncio reports no exception as never retrieved.
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return await asyncio.shield(task)


def _log_committed(actor: str, submitted: Sequence[tuple[SubmitOutcome, list[JobId]]]) -> None:
    """After COMMIT only: a line for every job this call created or ended."""
    if not log.isEnabledFor(logging.INFO):
        return  # every line below is INFO or DEBUG: spares building each job's fields
    for outcome, superseded in submitted:
        job = outcome.job
        if not outcome.created:
            log.debug("submission replayed", extra=job_fields(job, actor=actor))
            continue
        log.info("job submitted", extra=job_fields(job, actor=actor))
        for old_job_id in superseded:
            log.info(
                "job superseded by version %s",
                job.resource_version,
                extra={"job_id": old_job_id, "tenant": job.tenant, "state": JobState.SUPERSEDED.value, "actor": actor},
            )


def _log_created_plain(actor: str, tenant: TenantId, created: Iterable[tuple[JobId, str]]) -> None:
    """After COMMIT only: the line _log_committed writes for a new plain job, from its id and kind."""
    if not log.isEnabledFor(logging.INFO):
        return
    for job_id, kind in created:
        fields = {"job_id": job_id, "tenant": tenant, "kind": kind, "attempt": 0, "fencing_token": 0}
        log.info("job submitted", extra={**fields, "state": JobState.PENDING.value, "actor": actor})


def _is_plain(job: NewJob) -> bool:
    """Needs no lookups before its insert, so a batch can insert many in one statement."""
    return (
        job.idempotency_key is None
        and not job.resource_key
        and not job.depends_on
        and not job.dedupe_by_input
        and not job.limit_keys
        and job.sequence_key is None
        and job.singleton_key is None
        and job.debounce is None
    )


def _replay(existing: Job, existing_digest: bytes | None, digest: bytes | None) -> SubmitOutcome:
    if existing_digest != digest:
        raise AlreadyExists(
            "the idempotency key was used for a different request", metadata={"job_id": existing.job_id}
        )
    return SubmitOutcome(existing, False)


async def _dependency_states(conn: Connection, tenant: TenantId, job: NewJob, prefix: str) -> dict[JobId, JobState]:
    """The dependencies' states, share-locked until commit. Dependencies must exist already, so no
    cycle can ever form."""
    states = await job_store.dependency_states(conn, tenant, job.depends_on)
    missing = [
        FieldViolation(f"{prefix}depends_on[{i}]", "no such job")
        for i, dep in enumerate(job.depends_on)
        if dep not in states
    ]
    if missing:
        raise InvalidArgument(missing)
    return states


def _state_after(job: NewJob, states: dict[JobId, JobState]) -> tuple[JobState, JobError | None]:
    """PENDING when every dependency succeeded, FAILED when one ended otherwise, else BLOCKED."""
    for dep in job.depends_on:
        if states[dep] in _ENDED_BADLY:
            return JobState.FAILED, JobError(ErrorCategory.PERMANENT, f"dependency {dep} ended {states[dep].value}")
    if all(states[dep] is JobState.SUCCEEDED for dep in job.depends_on):
        return JobState.PENDING, None
    return JobState.BLOCKED, None


def _check_keys_within_batch(jobs: Sequence[NewJob]) -> None:
    """Items sharing an idempotency key are one job only when their requests are identical. Decided
    before anything is written: the earlier item's row would roll back with the refused batch, so an
    answer naming it would name a job that never existed."""
    first_with_key: dict[str, tuple[int, bytes]] = {}
    violations = []
    for index, job in enumerate(jobs):
        if job.idempotency_key is None:
            continue
        digest = request_digest(job)
        earlier = first_with_key.setdefault(job.idempotency_key, (index, digest))
        if earlier[1] != digest:
            violations.append(
                FieldViolation(
                    f"jobs[{index}].idempotency_key",
                    f"is the key of jobs[{earlier[0]}], whose request differs; one key names one request",
                )
            )
    if violations:
        raise InvalidArgument(violations)
