-- Retention: finished jobs deleted, with their history and result, once the retention period is over.
-- after: 0033_claim_statements_merged
--
-- The floor below which nothing finished is deleted, jobs_retention_floor(), is not here: it is the
-- operator's setting (docs/SECURITY.md), made once by migration 0011, and a file applied again whenever
-- its text changes would put back the default over what an operator chose.

-- The only way the worker role deletes, in two steps that run as their owner, so the worker role itself
-- holds no DELETE privilege at all. A finished job stays while any job names it in depends_on (a
-- dependent reopened by RetryJob must find how its dependencies ended).
-- 1. Lock a batch of finished jobs past the retention period and the floor that no job depends on.
--    SKIP LOCKED keeps sweeps of several replicas apart and off rows being retried at this moment.
CREATE OR REPLACE FUNCTION jobs_retention_lock(retention_seconds double precision, max_jobs integer) RETURNS SETOF uuid
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
        SELECT j.job_id
        FROM jobs AS j
        WHERE j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
          AND j.finished_at < clock_timestamp()
              - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
          AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ORDER BY j.finished_at
        LIMIT max_jobs
        FOR UPDATE OF j SKIP LOCKED
    $$;

-- 2. Delete those of the named jobs (with their history and result) that are still finished, past the
--    horizon and depended on by none, read with a snapshot taken after the lock: a submission naming a
--    job share-locks it, so one committed before the lock is seen, and one after waits and finds it gone.
--    Every condition is checked again here, whatever ids the caller passes.
CREATE OR REPLACE FUNCTION jobs_delete_finished(job_ids uuid[], retention_seconds double precision) RETURNS SETOF uuid
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
        WITH doomed AS (
            SELECT j.job_id
            FROM jobs AS j
            WHERE j.job_id = ANY (job_ids)
              AND j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
              AND j.finished_at < clock_timestamp()
                  - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
              AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ), events AS (
            DELETE FROM job_events AS e USING doomed AS d WHERE e.job_id = d.job_id
        ), results AS (
            DELETE FROM job_results AS r USING doomed AS d WHERE r.job_id = d.job_id
        )
        DELETE FROM jobs AS j
        USING doomed AS d
        WHERE j.job_id = d.job_id
        RETURNING j.job_id
    $$;
