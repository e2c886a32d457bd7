"""Child jobs: the jobs a handler spawned, created with its parent's accepted completion, in the same
transaction, in the parent's tenant. The fence decides for both: a completion the fence refuses (a lost
lease, a cancel, a repeated call after the first was accepted) creates no child, and the one it accepts
creates them all, once."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from api_service.usecases.submission import SubmissionService
from shared.domain.children import CHILDREN_BYTES_MAX, CHILDREN_PER_PARENT_MAX, child_problem
from shared.domain.errors import InvalidArgument
from shared.domain.ids import JobId
from shared.domain.jobs import ChildJob, Completion, ReportOutcome, child_size
from shared.storage import lease_store
from shared.storage.database import Database, set_tenant

log = logging.getLogger(__name__)


class SpawnCounter(Protocol):
    def spawned(self, tenant: str, kinds: Sequence[str]) -> None: ...


class ChildJobs:
    def __init__(self, db: Database, submissions: SubmissionService, counter: SpawnCounter | None = None) -> None:
        self._db = db
        self._submissions = submissions
        self._counter = counter

    async def refusals(self, completions: Sequence[Completion]) -> dict[JobId, str]:
        """Why the children of each completion named cannot be created, as far as that is known before
        the transaction: too many or too large, a refused field or id, a field out of bounds, a kind no
        tenant may submit. A dependency is looked up in the transaction (`complete`)."""
        refused: dict[JobId, str] = {}
        for completion in completions:
            problem = _bounds_problem(completion) or await self._field_problem(completion.children)
            if problem is not None:
                refused[completion.job_id] = problem
        return refused

    async def _field_problem(self, children: Sequence[ChildJob]) -> str | None:
        try:
            await self._submissions.validate([(f"children[{i}].", child.job) for i, child in enumerate(children)])
        except InvalidArgument as exc:
            return f"a spawned job was refused: {exc.message}"
        return None

    async def complete(self, worker_id: str, completion: Completion) -> ReportOutcome | str:
        """The fenced completion and, when the fence holds, its children, in one transaction of its own:
        the outcome, or why a child was refused (then nothing was stored)."""
        try:
            async with self._db.transaction() as conn:
                fenced = await lease_store.complete_parent(conn, worker_id=worker_id, completion=completion)
                if isinstance(fenced, ReportOutcome):
                    return fenced
                # The parent's tenant from here on: the children are walled in it like its own submissions.
                await set_tenant(conn, fenced)
                await self._submissions.spawn_in(conn, fenced, completion.job_id, completion.children)
        except InvalidArgument as exc:
            return f"a spawned job was refused: {exc.message}"
        if self._counter is not None:
            self._counter.spawned(fenced, [child.job.kind for child in completion.children])
        log.info("job spawned %d jobs", len(completion.children), extra={"job_id": completion.job_id, "tenant": fenced})
        return ReportOutcome.ACCEPTED


def _bounds_problem(completion: Completion) -> str | None:
    children = completion.children
    if len(children) > CHILDREN_PER_PARENT_MAX:
        return f"a job may spawn at most {CHILDREN_PER_PARENT_MAX} jobs; this one spawned {len(children)}"
    if sum(child_size(child.job) for child in children) > CHILDREN_BYTES_MAX:
        return f"a job's spawned jobs may hold at most {CHILDREN_BYTES_MAX} bytes together"
    earlier: set[JobId] = set()
    siblings = {child.job_id for child in children}
    for index, child in enumerate(children):
        problem = child_problem(child, completion.job_id, earlier, siblings)
        if problem is not None:
            return f"children[{index}]: {problem}"
        earlier.add(child.job_id)
    return None
