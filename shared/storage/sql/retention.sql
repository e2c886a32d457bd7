-- Statements of the retention sweep, which keeps finished history from growing without bound.
-- A finished job stays while any job names it in depends_on: a dependent reopened by RetryJob must
-- find how its dependencies ended, so a dependency goes only after every job that depends on it.

-- name: job_retention_lock
-- Locks a batch of jobs that finished before the horizon and that no job depends on, oldest first.
SELECT j.job_id
FROM jobs AS j
WHERE j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
  AND j.finished_at < clock_timestamp() - make_interval(secs => %(retention_seconds)s)
  AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
ORDER BY j.finished_at
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED;

-- name: job_delete_finished
-- Deletes the locked jobs, with their history and result, that still no job depends on. A submission
-- naming a job share-locks it, so one that committed before the lock was granted is visible to this
-- statement's newer snapshot, and one that comes after waits and then finds the job gone.
WITH doomed AS (
    SELECT j.job_id
    FROM jobs AS j
    WHERE j.job_id = ANY (%(job_ids)s::uuid[])
      AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
), events AS (
    DELETE FROM job_events AS e USING doomed AS d WHERE e.job_id = d.job_id
), results AS (
    DELETE FROM job_results AS r USING doomed AS d WHERE r.job_id = d.job_id
)
DELETE FROM jobs AS j
USING doomed AS d
WHERE j.job_id = d.job_id
RETURNING j.job_id;
