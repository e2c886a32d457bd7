"""Delivery sets: submitting the jobs of one resource version as one set, and reading it whole.

A set's members carry its resource key and version, so everything that already holds for versions holds for
the set: a newer version supersedes every unfinished member and the fan-in; a deletion ends them all. The
fan-in is an ordinary dependent of every member (BLOCKED until all succeeded, then run once)."""

from __future__ import annotations

import dataclasses

from api_service.usecases.submission import SubmissionService
from shared.domain.delivery_sets import (
    DELIVERY_SET_PAGE_BYTES,
    MEMBER_NAME_MAX_CHARS,
    MEMBERS_MAX,
    DeliverySet,
    FailurePolicy,
    NewDeliverySet,
    SetCursor,
    SetMember,
    SetState,
    set_state,
)
from shared.domain.errors import (
    AlreadyExists,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    ViolationCollector,
)
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobResult, NewJob
from shared.domain.paging import fitting, job_bytes
from shared.domain.submission_rules import SubmissionLimits, check_text
from shared.storage import delivery_set_store, job_store
from shared.storage.database import Connection, Database


def _check(new: NewDeliverySet) -> None:
    v = ViolationCollector()
    if not new.resource_key:
        v.add("resource_key", "is required")
    check_text(v, "resource_key", new.resource_key, SubmissionLimits().max_resource_key_chars)
    if new.resource_version < 1:
        v.add("resource_version", "must be at least 1")
    if not 1 <= len(new.members) <= MEMBERS_MAX:
        v.add("members", f"must hold 1 to {MEMBERS_MAX} members")
    seen: set[str] = set()
    for index, (name, job) in enumerate(new.members):
        if not name or name in seen:
            v.add(f"members[{index}].name", "must be non-empty and unique within the set")
        seen.add(name)
        check_text(v, f"members[{index}].name", name, MEMBER_NAME_MAX_CHARS)
        _check_resource(v, f"members[{index}].job.", job, new)
    if new.fan_in is not None:
        _check_resource(v, "fan_in.", new.fan_in, new)
        if len(new.fan_in.depends_on) + len(new.members) > SubmissionLimits().max_dependencies:
            v.add("fan_in.depends_on", f"with the members, must name at most {SubmissionLimits().max_dependencies}")
    v.raise_if_any()


def _check_resource(v: ViolationCollector, prefix: str, job: NewJob, new: NewDeliverySet) -> None:
    if job.resource_key not in (None, "", new.resource_key):
        v.add(f"{prefix}resource_key", "must be empty or the set's resource_key")
    if job.resource_version not in (None, 0, new.resource_version):
        v.add(f"{prefix}resource_version", "must be empty or the set's resource_version")


class DeliverySets:
    def __init__(self, db: Database, submissions: SubmissionService) -> None:
        self._db = db
        self._submissions = submissions

    async def submit(self, tenant: TenantId, actor: str, new: NewDeliverySet) -> tuple[DeliverySet, bool]:
        """All or nothing, in one transaction. A set is named by its key and version: the same again (same
        member names) answers the stored set with created = False; different members are ALREADY_EXISTS."""
        _check(new)
        key, version = new.resource_key, new.resource_version
        members = [
            (name, dataclasses.replace(job, resource_key=key, resource_version=version)) for name, job in new.members
        ]
        jobs = [(f"members[{i}].job.", job) for i, (_, job) in enumerate(members)]
        if new.fan_in is not None:
            jobs.append(("fan_in.", dataclasses.replace(new.fan_in, resource_key=key, resource_version=version)))
        await self._submissions.validate(jobs)
        async with self._db.transaction(tenant) as conn:
            await job_store.lock_resource_head_and_tombstone(conn, tenant, new.resource_key)
            existing = await delivery_set_store.get_header(conn, tenant, new.resource_key, new.resource_version)
            if existing is not None:
                stored = await self._view(conn, tenant, existing)
                if sorted(m.name for m in stored.members) != sorted(name for name, _ in members):
                    raise AlreadyExists(
                        "a delivery set with other members exists for this version", metadata={"set_id": stored.set_id}
                    )
                return stored, False
            stored_members = []
            for index, (name, job) in enumerate(members):
                outcome = await self._submissions.submit_in(conn, tenant, actor, job, f"members[{index}].job.")
                stored_members.append((name, outcome.job.job_id))
            fan_in_id = None
            if new.fan_in is not None:
                fan_in = dataclasses.replace(
                    new.fan_in,
                    resource_key=key,
                    resource_version=version,
                    depends_on=(*new.fan_in.depends_on, *(j for _, j in stored_members)),
                )
                waits = new.failure_policy is FailurePolicy.WAIT_FOR_MANUAL_RETRY
                outcome = await self._submissions.submit_in(conn, tenant, actor, fan_in, "fan_in.", fan_in_waits=waits)
                fan_in_id = outcome.job.job_id
            header = await delivery_set_store.insert(
                conn,
                tenant=tenant,
                actor=actor,
                resource_key=new.resource_key,
                resource_version=new.resource_version,
                policy=new.failure_policy,
                fan_in=fan_in_id,
                members=stored_members,
            )
            return await self._view(conn, tenant, header), True

    async def get(
        self, tenant: TenantId, resource_key: str, resource_version: int, after: SetCursor | None = None
    ) -> DeliverySet:
        """One page of a set as it stands; version 0 is the highest version a set was submitted for.
        `after` (from the previous page) names the set; the key and version must be its or absent."""
        async with self._db.transaction(tenant) as conn:
            if after is None:
                header = await delivery_set_store.get_header(conn, tenant, resource_key, resource_version)
            else:
                header = await delivery_set_store.get_header_by_id(conn, tenant, after.set_id)
                if header is not None and (
                    header.resource_key != resource_key or resource_version not in (0, header.resource_version)
                ):
                    raise InvalidArgument(FieldViolation("page_token", "is from another delivery set's page"))
            if header is None:
                raise NotFound("no delivery set was submitted for this resource key and version")
            return await self._view(conn, tenant, header, after)

    async def latest_complete(self, tenant: TenantId, resource_key: str, after: SetCursor | None = None) -> DeliverySet:
        """One page of the set of the key's highest submitted version, only once COMPLETE; never an older
        set, and never a page of another set than the first page's."""
        async with self._db.transaction(tenant) as conn:
            head = await job_store.resource_head_and_tombstone(conn, tenant, resource_key)
            if head is None or head[0] <= head[1]:
                raise NotFound("no delivery set was submitted for this resource key")
            header = await delivery_set_store.get_header(conn, tenant, resource_key, head[0])
            if header is None:
                raise NotFound(f"version {head[0]} of this resource key was not submitted as a delivery set")
            if after is not None and header.set_id != after.set_id:
                raise _changed(f"version {head[0]} was submitted since the first page")
            found = await self._view(conn, tenant, header, after)
        if found.state is not SetState.COMPLETE:
            raise FailedPrecondition(
                f"the delivery set of version {head[0]} is not complete: it is {found.state.value}",
                reason="RESULT_NOT_READY",
                metadata={"resource_version": str(head[0]), "state": found.state.value, "set_id": found.set_id},
            )
        return found

    async def _view(
        self,
        conn: Connection,
        tenant: TenantId,
        header: delivery_set_store.SetHeader,
        after: SetCursor | None = None,
    ) -> DeliverySet:
        """The set's state from every member, and one page of its members (the fan-in last), with their
        results when the set is complete; only that page's results are read."""
        head = await job_store.resource_head_and_tombstone(conn, tenant, header.resource_key)
        latest, deleted = head if head else (header.resource_version, 0)
        rows = await delivery_set_store.read_rows(conn, tenant, header.set_id)
        named = sorted((row for row in rows if row.name is not None), key=lambda row: row.name or "")
        fan_in = next((row for row in rows if row.name is None), None)
        state = set_state(
            header.failure_policy,
            (row.job.state for row in named),
            member_count=header.member_count,
            newer_version=latest > header.resource_version,
            deleted=header.resource_version <= deleted,
        )
        complete = state is SetState.COMPLETE
        if after is not None and after.with_results and not complete:
            raise _changed(f"it is {state.value} now")
        # Results are read together or not at all: pages after a first page without them carry none.
        carried = complete and (after is None or after.with_results)
        rest = [row for row in named if after is None or (row.name or "") > after.after_name]
        rest += [fan_in] if fan_in is not None else []
        page = rest[: fitting(rest, lambda row: _row_bytes(row, carried), DELIVERY_SET_PAGE_BYTES)]
        results = await self._results(conn, tenant, page) if carried else {}
        on_page = [row for row in page if row.name is not None]
        fan_in_shown = fan_in if page and page[-1] is fan_in else None
        return DeliverySet(
            set_id=header.set_id,
            resource_key=header.resource_key,
            resource_version=header.resource_version,
            failure_policy=header.failure_policy,
            state=state,
            members=tuple(SetMember(row.name or "", row.job, results.get(row.job.job_id)) for row in on_page),
            fan_in=fan_in_shown.job if fan_in_shown else None,
            fan_in_result=results.get(fan_in_shown.job.job_id) if fan_in_shown else None,
            created_at=header.created_at,
            next_cursor=SetCursor(header.set_id, on_page[-1].name or "", carried) if len(page) < len(rest) else None,
        )

    @staticmethod
    async def _results(
        conn: Connection, tenant: TenantId, page: list[delivery_set_store.SetRow]
    ) -> dict[JobId, JobResult]:
        """The page's stored results; a result gone since the rows were read (a deletion in between) fails
        the read rather than answer a complete set without it."""
        wanted = [row.job.job_id for row in page if row.result_bytes is not None]
        results = await delivery_set_store.read_results(conn, tenant, wanted)
        if len(results) != len(wanted):
            raise _changed("a member's result is gone")
        return results


def _row_bytes(row: delivery_set_store.SetRow, with_result: bool) -> int:
    return job_bytes(row.job) + (row.result_bytes or 0 if with_result else 0)


def _changed(why: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"the delivery set changed between its pages ({why}): read it again from the first page",
        reason="DELIVERY_SET_CHANGED",
    )
