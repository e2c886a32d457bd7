-- Statements of the retention sweep, which keeps finished history from growing without bound.

-- name: job_delete_finished
-- Retention: deletes jobs that finished before the horizon, with their history and result.
WITH doomed AS (
    SELECT job_id
    FROM jobs
    WHERE state IN ('succeeded', 'failed', 'cancelled', 'superseded')
      AND finished_at < clock_timestamp() - make_interval(secs => %(retention_seconds)s)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM job_events AS e USING doomed AS d WHERE e.job_id = d.job_id
), results AS (
    DELETE FROM job_results AS r USING doomed AS d WHERE r.job_id = d.job_id
)
DELETE FROM jobs AS j
USING doomed AS d
WHERE j.job_id = d.job_id
RETURNING j.job_id;
