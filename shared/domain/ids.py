"""Identifier types, so a tenant name is never passed where a job id belongs."""

# Job ids a worker makes for spawned jobs are made as the API makes them, so the SDK holds the maker.
from durable_jobs.children import new_job_ids

# The ids a handler sees are the SDK's, so that the service and handler code share one type.
from durable_jobs.ids import FencingToken, JobId, TenantId

__all__ = ["FencingToken", "JobId", "TenantId", "new_job_ids"]
