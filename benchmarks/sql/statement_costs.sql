-- What each part of the schema costs the statements a job goes through (benchmarks/statement_costs.py): each
-- block takes one part away from a side's database, which is then measured against a side as shipped.

-- name: without_history
-- The history, the running tallies and the watchers' notifications of inserts and updates.
ALTER TABLE jobs DISABLE TRIGGER jobs_record_insert, DISABLE TRIGGER jobs_record_update;

-- name: without_settling
-- The statement triggers that settle dependents and release sequences, which most statements leave as they are.
ALTER TABLE jobs DISABLE TRIGGER jobs_settle_dependents, DISABLE TRIGGER jobs_sequence_release;

-- name: without_every_trigger
-- Every trigger of the jobs table.
ALTER TABLE jobs DISABLE TRIGGER USER;

-- name: without_tenant_created_index
-- The index ListJobs pages a tenant's jobs by, written by the insert, the claim and the completion.
DROP INDEX jobs_tenant_created_idx;

-- name: without_tenant_queued_index
-- The index of each tenant's queued jobs, written by the insert.
DROP INDEX jobs_tenant_queued_idx;

-- name: backend_pid
-- The session's server process, whose CPU time the measurement reads.
SELECT pg_backend_pid() AS pid;
