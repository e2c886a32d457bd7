-- Dependencies: what becomes of blocked jobs when a job they depend on ends.
-- after: 0033_claim_statements_merged

-- When a job ends, its blocked dependents are released (all it depends on succeeded) or fail with it.
-- A guard costs the statements that end nothing, or that end jobs nobody waits for, two probes instead of
-- a planned join of the transition tables.
CREATE OR REPLACE FUNCTION jobs_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended record;
BEGIN
    -- Most statements end no job (claims, heartbeats), and most end jobs while no job is blocked: a scan of
    -- the changed rows and one probe of an index say so before the lookup that is planned per statement.
    IF NOT EXISTS (SELECT 1 FROM new_rows AS n WHERE n.state IN ('succeeded', 'failed', 'cancelled', 'superseded'))
       OR NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.state = 'blocked') THEN
        RETURN NULL;
    END IF;
    FOR ended IN EXECUTE $sql$
        SELECT n.job_id, n.state
        FROM new_rows AS n
        JOIN old_rows AS o ON o.job_id = n.job_id
        WHERE o.state IS DISTINCT FROM n.state
          AND n.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
          AND EXISTS (SELECT 1 FROM jobs AS d WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[n.job_id])
        ORDER BY n.job_id
    $sql$
    LOOP
        IF ended.state = 'succeeded' THEN
            PERFORM 1 FROM jobs AS d
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id]
            ORDER BY d.job_id
            FOR UPDATE;
            UPDATE jobs AS d
            SET state = 'pending', run_after = greatest(d.run_after, clock_timestamp()),
                transition_actor = 'system', transition_reason = 'dependencies succeeded'
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id]
              AND NOT EXISTS (
                  SELECT 1 FROM jobs AS p
                  WHERE p.job_id = ANY (d.depends_on) AND p.state <> 'succeeded');
        ELSE
            UPDATE jobs AS d
            SET state = 'failed', finished_at = clock_timestamp(),
                last_error_category = 'permanent',
                last_error_message = 'dependency ' || ended.job_id || ' ended ' || ended.state,
                transition_actor = 'system',
                transition_reason = 'dependency ' || ended.job_id || ' ended ' || ended.state
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id]
              -- A failed member leaves a waiting set's fan-in blocked; cancel and supersede still end it.
              AND NOT (d.waits_for_manual_retry AND ended.state = 'failed');
        END IF;
    END LOOP;
    RETURN NULL;
END $$;
