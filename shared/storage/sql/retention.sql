-- Statements of the retention sweep, which keeps finished history from growing without bound. Both call
-- functions of routines/retention.sql that run as their owner, so the worker role needs no DELETE
-- privilege; they hold the database's retention floor and keep a finished job while any job depends on it.

-- name: job_retention_lock
-- Locks a batch of jobs that finished before the horizon and that no job depends on, oldest first.
SELECT job_id FROM jobs_retention_lock(%(retention_seconds)s, %(limit)s) AS job_id;

-- name: job_delete_finished
-- Deletes those of the locked jobs, with their history and result, that still qualify and that still no job depends on.
SELECT job_id FROM jobs_delete_finished(%(job_ids)s::uuid[], %(retention_seconds)s) AS job_id;
