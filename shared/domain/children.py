"""What makes a spawned job acceptable beside the rules of any submission (submission_rules)."""

from __future__ import annotations

from collections.abc import Collection

# The bounds are the SDK's, so that ctx.spawn refuses at once what the API would refuse later.
from durable_jobs.children import CHILDREN_BYTES_MAX, CHILDREN_PER_PARENT_MAX
from shared.domain.ids import JobId
from shared.domain.jobs import ChildJob
from shared.domain.submission_rules import is_job_id

__all__ = ["CHILDREN_BYTES_MAX", "CHILDREN_PER_PARENT_MAX", "child_problem"]


def child_problem(
    child: ChildJob, parent: JobId, earlier: Collection[JobId], siblings: Collection[JobId]
) -> str | None:
    """Why one spawned job cannot be created, or None. `earlier` are the ids spawned before it,
    `siblings` all of the completion's: a dependency on a sibling must name one spawned before it (so
    no cycle can form, as dependencies of a submission must exist already)."""
    if not is_job_id(child.job_id):
        return "job_id must be a job id (a UUID)"
    if child.job_id == parent or child.job_id in earlier:
        return "job_id names another job of this completion"
    job = child.job
    refused = [
        name
        for name, given in (
            ("idempotency_key", job.idempotency_key is not None),
            ("resource_key", bool(job.resource_key)),
            ("resource_version", bool(job.resource_version)),
            ("dedupe_by_input", job.dedupe_by_input),
        )
        if given
    ]
    if refused:
        return f"a spawned job cannot have {', '.join(refused)}: its job id already names it once"
    for index, dependency in enumerate(job.depends_on):
        if dependency in siblings and dependency not in earlier:
            return f"depends_on[{index}] names a job spawned after it (or itself)"
    return None
