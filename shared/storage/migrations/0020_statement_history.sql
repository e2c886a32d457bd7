-- History and dependents by statement, not by row. A claim or completion batch of 1,000 jobs ran three
-- row triggers per job (record the event, notify watchers, settle dependents), each a PL/pgSQL call with
-- its own INSERT or lookup: together more than half of those statements' time. Statement-level triggers
-- over transition tables do the same work once per statement: one INSERT … SELECT of every changed row's
-- event, notifications packed many to a payload, and one lookup for dependents that skips at once the
-- jobs nobody waits for. What is recorded is unchanged: one event per transition (per rise of `sequence`),
-- with the same columns, in the transaction of the statement that made it.

-- Watchers' notifications carry "<job id>:<sequence>" entries joined by ',', up to this many per payload
-- (each at most 58 bytes, well under the 8,000-byte payload limit).
CREATE FUNCTION jobs_changed_batch_size() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 100 $$;

-- The UPDATE branch and the dependents' lookup join the two transition tables, and run by EXECUTE so
-- each is planned for the statement's own row counts: PL/pgSQL would keep the plan made at the first
-- call, and a nested loop planned for a one-row claim, reused for batches of 1,000, cost more than the
-- row triggers did.
CREATE OR REPLACE FUNCTION jobs_record_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor,
                                reason)
        SELECT n.job_id, n.tenant, n.sequence, NULL, n.state, n.attempts, n.fencing_token, n.transition_actor,
               n.transition_reason
        FROM new_rows AS n;
        PERFORM pg_notify('jobs_changed', string_agg(n.job_id::text || ':' || n.sequence::text, ','))
        FROM (SELECT job_id, sequence, row_number() OVER () AS position FROM new_rows) AS n
        GROUP BY (n.position - 1) / jobs_changed_batch_size();
    ELSE
        -- bump_sequence raised `sequence` exactly for the rows whose state or cancel request changed.
        EXECUTE $sql$
            WITH changed AS MATERIALIZED (
                SELECT n.job_id, n.tenant, n.sequence, o.state AS from_state, n.state AS to_state, n.attempts,
                       n.fencing_token, n.transition_actor, n.transition_reason,
                       row_number() OVER () AS position
                FROM new_rows AS n
                JOIN old_rows AS o ON o.job_id = n.job_id
                WHERE o.sequence IS DISTINCT FROM n.sequence
            ), recorded AS (
                INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token,
                                        actor, reason)
                SELECT job_id, tenant, sequence, from_state, to_state, attempts, fencing_token, transition_actor,
                       transition_reason
                FROM changed
            )
            SELECT pg_notify('jobs_changed', string_agg(c.job_id::text || ':' || c.sequence::text, ','))
            FROM changed AS c
            GROUP BY (c.position - 1) / jobs_changed_batch_size()
        $sql$;
    END IF;
    RETURN NULL;
END $$;

-- The same rules as before (0006, and 0018's fan-in that waits for a manual retry), per ended job in
-- job-id order (dependents locked first, in one order),
-- run only for ended jobs some BLOCKED job names; the others cost one probe of a partial index.
CREATE OR REPLACE FUNCTION jobs_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended record;
BEGIN
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

DROP TRIGGER jobs_record_insert ON jobs;
DROP TRIGGER jobs_record_update ON jobs;
DROP TRIGGER jobs_settle_dependents ON jobs;

-- Statement triggers of one event fire in name order: the events of a statement are recorded before the
-- dependents it settles record theirs, as with the row triggers.
CREATE TRIGGER jobs_record_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_record_event();
CREATE TRIGGER jobs_record_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_record_event();
CREATE TRIGGER jobs_settle_dependents AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_settle_dependents();

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_changed_batch_size() OWNER TO jobs_migrator;
    END IF;
END $$;
