-- The history trigger's UPDATE branch in static SQL, so that its plan lasts the session. 0020 ran it by
-- EXECUTE, planned afresh at every statement that changes jobs, for fear of PL/pgSQL keeping a nested
-- loop planned for a one-row claim and reusing it for a batch of a thousand. The planning cost more than
-- the run: 0.27 ms of planning against 0.8 ms of running, for every claim and every completion. Now the
-- join of the two transition tables is kept from being a nested loop (enable_nestloop off, this function
-- only), which a hash join of one row costs nothing against, and it is planned once per session. The
-- notifications, sent only while watched (0027), are a statement of their own: PL/pgSQL runs a statement
-- that returns rows (the notifications) only through PERFORM, which cannot start with a WITH.
-- What is recorded and notified is unchanged.
CREATE OR REPLACE FUNCTION jobs_record_event() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop = off
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor,
                                reason)
        SELECT n.job_id, n.tenant, n.sequence, NULL, n.state, n.attempts, n.fencing_token, n.transition_actor,
               n.transition_reason
        FROM new_rows AS n;
        IF jobs_changes_watched() THEN
            PERFORM pg_notify('jobs_changed', string_agg(n.job_id::text || ':' || n.sequence::text, ','))
            FROM (SELECT job_id, sequence, row_number() OVER () AS position FROM new_rows) AS n
            GROUP BY (n.position - 1) / jobs_changed_batch_size();
        END IF;
    ELSE
        -- bump_sequence raised `sequence` exactly for the rows whose state or cancel request changed.
        INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor,
                                reason)
        SELECT n.job_id, n.tenant, n.sequence, o.state, n.state, n.attempts, n.fencing_token, n.transition_actor,
               n.transition_reason
        FROM new_rows AS n
        JOIN old_rows AS o ON o.job_id = n.job_id
        WHERE o.sequence IS DISTINCT FROM n.sequence;
        IF jobs_changes_watched() THEN
            PERFORM pg_notify('jobs_changed', string_agg(c.job_id::text || ':' || c.sequence::text, ','))
            FROM (SELECT n.job_id, n.sequence, row_number() OVER () AS position
                  FROM new_rows AS n
                  JOIN old_rows AS o ON o.job_id = n.job_id
                  WHERE o.sequence IS DISTINCT FROM n.sequence) AS c
            GROUP BY (c.position - 1) / jobs_changed_batch_size();
        END IF;
    END IF;
    RETURN NULL;
END $$;
