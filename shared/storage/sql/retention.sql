-- Statements of the retention sweep, which keeps finished history from growing without bound.

-- name: job_delete_finished
-- Retention: deletes jobs that finished before the horizon, with their history and result; the
-- database function also holds the retention floor, so the worker role needs no DELETE privilege.
SELECT deleted AS job_id
FROM jobs_delete_finished(%(retention_seconds)s, %(limit)s) AS deleted;
