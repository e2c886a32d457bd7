-- The worker role may do what workers do and nothing more.
--
-- 0007 let jobs_worker update any job row (USING (true)), so it could stamp an unfinished job CANCELLED
-- with a finished_at long past and then delete it as "finished", or rewrite a SUCCEEDED job. What a
-- worker really does to jobs: claim (pending, retry wait -> running), end expired leases (running ->
-- retry wait, outcome unknown, failed, cancelled on request), fail waiting jobs past their deadline, and,
-- through the dependents trigger, fail or release blocked ones. Every one of these starts from an
-- unfinished row and stamps finished_at with the clock of its own statement.

DROP POLICY jobs_worker_update ON jobs;
CREATE POLICY jobs_worker_update ON jobs FOR UPDATE TO jobs_worker
    -- Terminal rows, and OUTCOME_UNKNOWN (a person decides those), are out of the worker's reach.
    USING (state IN ('pending', 'blocked', 'running', 'retry_wait'))
    WITH CHECK (
        CASE
            WHEN state IN ('pending', 'blocked', 'running', 'retry_wait', 'outcome_unknown') THEN finished_at IS NULL
            -- now() is this transaction's start and clock_timestamp() is later than the statement's own
            -- stamp: a finished_at in between is the statement's, never one made up to look old.
            WHEN state = 'failed' THEN finished_at BETWEEN now() AND clock_timestamp()
            -- A worker ends a job CANCELLED only because its tenant asked (a flag it cannot set).
            WHEN state = 'cancelled' THEN cancel_requested AND finished_at BETWEEN now() AND clock_timestamp()
            -- SUCCEEDED is the API's (with the result), SUPERSEDED the API's (with the newer version).
            ELSE false
        END);

-- History: the worker writes exactly the event the jobs_record_event trigger makes for the row it has
-- just changed (events are unique per job and sequence, so no second one for the same change).
DROP POLICY job_events_worker_insert ON job_events;
CREATE POLICY job_events_worker_insert ON job_events FOR INSERT TO jobs_worker
    WITH CHECK (EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.job_id = job_events.job_id AND j.tenant = job_events.tenant
                          AND j.sequence = job_events.sequence AND j.state = job_events.to_state));

-- Receipts: readable for reconciliation, written only for the current attempt of a running job under
-- that attempt's token; an earlier attempt's intents and confirmations stay as they were.
DROP POLICY job_receipts_worker ON job_receipts;
CREATE POLICY job_receipts_worker_read ON job_receipts FOR SELECT TO jobs_worker USING (true);
CREATE POLICY job_receipts_worker_insert ON job_receipts FOR INSERT TO jobs_worker
    WITH CHECK (EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.job_id = job_receipts.job_id AND j.state = 'running'
                          AND j.attempts = job_receipts.attempt AND j.fencing_token = job_receipts.fencing_token));
CREATE POLICY job_receipts_worker_update ON job_receipts FOR UPDATE TO jobs_worker
    USING (EXISTS (SELECT 1 FROM jobs AS j
                   WHERE j.job_id = job_receipts.job_id AND j.state = 'running'
                     AND j.attempts = job_receipts.attempt AND j.fencing_token = job_receipts.fencing_token))
    WITH CHECK (EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.job_id = job_receipts.job_id AND j.state = 'running'
                          AND j.attempts = job_receipts.attempt AND j.fencing_token = job_receipts.fencing_token));

-- Retention. The period is the workers' setting (JOBS_RETENTION_SECONDS), which a compromised worker
-- could set to zero; the database holds a floor of its own below which nothing finished is deleted,
-- so a result stays readable for at least that long. An operator may redefine this function (as
-- jobs_migrator) to lower or raise the floor.
CREATE FUNCTION jobs_retention_floor() RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT interval '1 hour' $$;

-- The only way the worker role deletes, in two steps that run as their owner, so the worker role itself
-- holds no DELETE privilege at all. A finished job stays while any job names it in depends_on (a
-- dependent reopened by RetryJob must find how its dependencies ended).
-- 1. Lock a batch of finished jobs past the retention period and the floor that no job depends on.
--    SKIP LOCKED keeps sweeps of several replicas apart and off rows being retried at this moment.
CREATE FUNCTION jobs_retention_lock(retention_seconds double precision, max_jobs integer) RETURNS SETOF uuid
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
CREATE FUNCTION jobs_delete_finished(job_ids uuid[], retention_seconds double precision) RETURNS SETOF uuid
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
REVOKE ALL ON FUNCTION jobs_retention_lock(double precision, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobs_delete_finished(uuid[], double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_retention_lock(double precision, integer) TO jobs_worker;
GRANT EXECUTE ON FUNCTION jobs_delete_finished(uuid[], double precision) TO jobs_worker;

DROP POLICY jobs_worker_delete ON jobs;
DROP POLICY job_events_worker_retention ON job_events;
DROP POLICY job_events_worker_delete ON job_events;
DROP POLICY job_results_worker_retention ON job_results;
DROP POLICY job_results_worker_delete ON job_results;
DROP FUNCTION jobs_finished(uuid);
REVOKE DELETE ON jobs, job_events, job_results FROM jobs_worker;
REVOKE SELECT (job_id) ON job_events, job_results FROM jobs_worker;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_retention_floor() OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_retention_lock(double precision, integer) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_delete_finished(uuid[], double precision) OWNER TO jobs_migrator;
    END IF;
END $$;
