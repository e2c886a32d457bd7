-- The per-tenant count of waiting jobs (job_count_queued, the queued-jobs quota) reads jobs_tenant_queued_idx,
-- a hash index on `tenant` since 0007. A hash index keeps every entry of one key in one bucket, a chain of
-- overflow pages, and an insert walks that chain from its start to the first page with room: a tenant's
-- submission cost grew with its own backlog, about 2,500 pages walked per job behind 1,000,000 of its jobs,
-- and building the index over such a backlog took minutes. A B-tree keeps equal keys in heap order and
-- finds an insert's page by descent, whatever the backlog; its deduplication keeps the entries of one
-- tenant about as small. Same name, same predicate, same use: `tenant = …` only.
DROP INDEX jobs_tenant_queued_idx;
CREATE INDEX jobs_tenant_queued_idx ON jobs (tenant) WHERE state IN ('pending', 'retry_wait', 'blocked');
