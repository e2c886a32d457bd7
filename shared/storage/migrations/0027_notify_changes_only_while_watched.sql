-- Watchers' notifications (jobs_changed) only while some API process has a WatchJob stream open. A
-- transaction that notifies takes, at its commit, one lock every notifying transaction in the database
-- shares, and holds it through its WAL flush: every claim, completion and submission notified, so their
-- commits went one at a time. Four claimers draining a queue spent on average 0.5-0.9 of themselves
-- waiting for that lock; without the notifications the drain ran 4% faster with one tenant and no limits
-- and 7.5% faster with four tenants under limits. Most of the time nobody watches: an API process that
-- has streams open keeps a row here (the API's change_watcher_register, refreshed while they stay open),
-- and statements notify only while a row is live. A stream starts reading after its process's row is
-- committed; a change whose statement ran before that commit, and that a stream's first read missed, is
-- caught by the read every stream makes again shortly after its process registered.
CREATE TABLE job_change_watchers (
    listener text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON job_change_watchers TO jobs_api;
GRANT SELECT ON job_change_watchers TO jobs_worker;

-- Whether any watcher's registration is live, by the transaction's clock.
CREATE FUNCTION jobs_changes_watched() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM job_change_watchers AS w WHERE w.expires_at > now()) $$;

-- 0020's history trigger, its notifications sent only while watched.
CREATE OR REPLACE FUNCTION jobs_record_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
            WHERE jobs_changes_watched()
            GROUP BY (c.position - 1) / jobs_changed_batch_size()
        $sql$;
    END IF;
    RETURN NULL;
END $$;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_change_watchers OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_changes_watched() OWNER TO jobs_migrator;
    END IF;
END $$;
