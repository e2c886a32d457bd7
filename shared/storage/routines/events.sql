-- A job's history and the notifications of its changes, written by triggers in the transaction that changes it.
-- after: 0033_claim_statements_merged

-- A job's `sequence` rises by one with every change of its state or cancel request, and the history
-- records exactly the rows where it rose. The statements that make most transitions, the claim and the
-- completion batch, raise it themselves in the row they write, and the trigger is called only for a row
-- whose statement did not write what the rule says.
-- It then writes it, whatever the statement wrote: so the rule holds for every statement and every role,
-- and a worker may write the column (its claim does) without being able to set it to anything else.
-- A PL/pgSQL call per updated row was about 1.5 us of each claimed and each completed job (batches of
-- 500 on one connection: claim 20.6 -> 19.1 us a job, completion 21.5 -> 19.9).
CREATE OR REPLACE FUNCTION jobs_bump_sequence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        NEW.sequence := OLD.sequence + 1;
    ELSE
        NEW.sequence := OLD.sequence;
    END IF;
    RETURN NEW;
END $$;

-- The history, the running tallies and the watchers' notifications, one statement's rows at a time, in
-- static SQL so that its plans last the session. The join of the two transition tables is kept from being
-- a nested loop, which a plan made for a one-row claim would reuse for a batch of a thousand; a hash join
-- of one row costs nothing against it. The tallies' keys are expanded in the select list, not by a
-- lateral join: with nested loops off, a join that can only be one is priced past the JIT threshold, and
-- compiling it took half a second at every statement. JIT is off for the same reason: no statement of
-- this trigger reads enough rows to repay a compilation. The notifications, sent only while someone
-- watches, are a statement of their own: PL/pgSQL runs a statement that returns rows only through
-- PERFORM, which cannot start with a WITH.
CREATE OR REPLACE FUNCTION jobs_record_event() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop = off
    SET jit = off
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
        -- The running rows after the statement less those before, by the keys they are tallied under: rows
        -- that stayed running with the same keys (a lease renewed) cancel out, and nothing is written. Rows
        -- are grouped by their keys past their kind's and tenant's only when they have some (most have
        -- none): hashing each row's array cost a sixth of the statement.
        INSERT INTO job_running_tallies AS t (key, holder, running)
        SELECT d.key, pg_backend_pid(), sum(d.n)
        FROM (SELECT unnest(jobs_running_tally_keys(g.kind, g.tenant, g.running_keys)) AS key, g.n
              FROM (SELECT n.kind, n.tenant, CASE WHEN cardinality(n.running_keys) > 2 THEN n.running_keys END
                               AS running_keys,
                           count(*) AS n
                    FROM new_rows AS n
                    WHERE n.state = 'running'
                    GROUP BY 1, 2, 3
                    UNION ALL
                    SELECT o.kind, o.tenant, CASE WHEN cardinality(o.running_keys) > 2 THEN o.running_keys END,
                           -count(*)
                    FROM old_rows AS o
                    WHERE o.state = 'running'
                    GROUP BY 1, 2, 3) AS g) AS d
        GROUP BY d.key
        HAVING sum(d.n) <> 0
        ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running;
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

-- Watchers' notifications carry "<job id>:<sequence>" entries joined by ',', up to this many per payload
-- (each at most 58 bytes, well under the 8,000-byte payload limit).
CREATE OR REPLACE FUNCTION jobs_changed_batch_size() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 100 $$;

-- Whether any watcher's registration is live, by the transaction's clock. In PL/pgSQL, whose plan lasts
-- the session: the history trigger asks at every statement that changes jobs, and an SQL function with a
-- subquery is not inlined but planned again in every transaction that calls it.
CREATE OR REPLACE FUNCTION jobs_changes_watched() RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM job_change_watchers AS w WHERE w.expires_at > now());
END
$$;

CREATE OR REPLACE FUNCTION jobs_notify_runnable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Identical notifications in one transaction are folded into one: one wake-up per batch.
    PERFORM pg_notify('jobs_runnable', '');
    RETURN NULL;
END $$;

-- Tells workers at once that a job they may hold was cancelled or superseded, so a handler stops
-- within a second instead of at its next heartbeat.
CREATE OR REPLACE FUNCTION jobs_notify_stop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobs_stop', NEW.job_id::text);
    RETURN NULL;
END $$;
