-- Two dependencies of one job succeeding in concurrent transactions each saw the other still running,
-- so neither made the dependent runnable and it stayed BLOCKED for ever. The dependents are now
-- locked first, in one order: the second transaction waits for the first to commit, and its check,
-- a new statement with a new snapshot, sees both dependencies succeeded.
CREATE OR REPLACE FUNCTION jobs_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'succeeded' THEN
        PERFORM 1 FROM jobs AS d
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id]
        ORDER BY d.job_id
        FOR UPDATE;
        UPDATE jobs AS d
        SET state = 'pending', run_after = greatest(d.run_after, clock_timestamp()),
            transition_actor = 'system', transition_reason = 'dependencies succeeded'
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id]
          AND NOT EXISTS (
              SELECT 1 FROM jobs AS p
              WHERE p.job_id = ANY (d.depends_on) AND p.state <> 'succeeded');
    ELSE
        UPDATE jobs AS d
        SET state = 'failed', finished_at = clock_timestamp(),
            last_error_category = 'permanent',
            last_error_message = 'dependency ' || NEW.job_id || ' ended ' || NEW.state,
            transition_actor = 'system', transition_reason = 'dependency ' || NEW.job_id || ' ended ' || NEW.state
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id];
    END IF;
    RETURN NULL;
END $$;
