-- Sequences: one job of a key at a time, in acceptance order (migration 0041, docs/SEQUENCES.md).
-- after: 0038_job_logs
--
-- Who waits for whom. Submissions to a sequence, and jobs of it reopened by a retry, take the sequence's
-- advisory lock, so they decide one after another. The end of a head takes no such lock: a submission
-- (or a reopening) that finds the sequence held instead share-locks the job holding it, so that job
-- cannot end before the new one has committed, and its release then sees the new one.

-- The advisory lock of one of a tenant's keys (`what`: sequence, singleton or debounce). Two keys sharing
-- a lock only wait for each other, which is harmless.
CREATE OR REPLACE FUNCTION jobs_key_lock_id(what text, of_tenant text, of_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT hashtextextended(what || ':' || length(of_tenant) || ':' || of_tenant || '/' || of_key, 39) $$;

-- Whether a job other than `except_job` still holds the sequence; if one does, its first (by acceptance
-- order, or only its head when `head_only`) is share-locked until commit. One that ends while this waits
-- for its lock is passed over: each try reads what committed before it.
CREATE OR REPLACE FUNCTION jobs_sequence_hold(of_tenant text, of_key text, except_job uuid, head_only boolean)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    holder uuid;
BEGIN
    LOOP
        SELECT j.job_id INTO holder
        FROM jobs AS j
        WHERE j.tenant = of_tenant AND j.sequence_key = of_key
          AND j.state NOT IN ('succeeded', 'cancelled', 'superseded')
          AND j.job_id IS DISTINCT FROM except_job
          AND (NOT head_only OR j.parked_on IS DISTINCT FROM '')
        ORDER BY j.sequence_position
        LIMIT 1;
        IF holder IS NULL THEN
            RETURN false;
        END IF;
        PERFORM 1 FROM jobs AS j
        WHERE j.job_id = holder AND j.state NOT IN ('succeeded', 'cancelled', 'superseded')
        FOR SHARE;
        IF FOUND THEN
            RETURN true;
        END IF;
        holder := NULL;
    END LOOP;
END
$$;

-- After the heads of the given sequences (tenants[i], keys[i]) ended: the next job still holding each
-- sequence, in acceptance order, becomes its head, in one statement for the lot. A next job cancelled
-- meanwhile (the update's recheck passes it over) leaves its sequence without a head: such a sequence is
-- looked at again, a job at a time. Owned by the migrator: the next job may be FAILED (its deadline passed
-- while it waited), which a worker's own rights cannot write.
CREATE OR REPLACE FUNCTION jobs_sequence_release_next(tenants text[], keys text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
DECLARE
    stalled record;
    next_id uuid;
BEGIN
    WITH ended AS (
        SELECT DISTINCT e.tenant, e.key FROM unnest(tenants, keys) AS e(tenant, key)
    ), next_jobs AS (
        SELECT n.job_id
        FROM ended AS e
        CROSS JOIN LATERAL (SELECT j.job_id
                            FROM jobs AS j
                            WHERE j.tenant = e.tenant AND j.sequence_key = e.key
                              AND j.state NOT IN ('succeeded', 'cancelled', 'superseded')
                            ORDER BY j.sequence_position
                            LIMIT 1) AS n
    )
    UPDATE jobs AS j
    SET parked_on = NULL
    FROM next_jobs AS n
    WHERE j.job_id = n.job_id AND j.parked_on = '' AND j.state NOT IN ('succeeded', 'cancelled', 'superseded');
    FOR stalled IN
        SELECT DISTINCT e.tenant, e.key
        FROM unnest(tenants, keys) AS e(tenant, key)
        WHERE NOT EXISTS (SELECT 1 FROM jobs AS j
                          WHERE j.tenant = e.tenant AND j.sequence_key = e.key
                            AND j.state NOT IN ('succeeded', 'cancelled', 'superseded')
                            AND j.parked_on IS DISTINCT FROM '')
    LOOP
        LOOP
            SELECT j.job_id INTO next_id
            FROM jobs AS j
            WHERE j.tenant = stalled.tenant AND j.sequence_key = stalled.key
              AND j.state NOT IN ('succeeded', 'cancelled', 'superseded')
            ORDER BY j.sequence_position
            LIMIT 1;
            EXIT WHEN next_id IS NULL;
            UPDATE jobs AS j
            SET parked_on = NULL
            WHERE j.job_id = next_id AND j.state NOT IN ('succeeded', 'cancelled', 'superseded');
            EXIT WHEN FOUND;
            next_id := NULL;
        END LOOP;
        next_id := NULL;
    END LOOP;
END
$$;

-- A statement's ended heads of sequences (unfinished before it, and after it SUCCEEDED, CANCELLED or
-- SUPERSEDED, or deleted: retention taking a FAILED one): their sequences' next jobs are released. Most
-- statements end none, which one scan of the changed rows says.
CREATE OR REPLACE FUNCTION jobs_sequence_release() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    tenants text[];
    keys text[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.tenant), array_agg(o.sequence_key)
        INTO tenants, keys
        FROM old_rows AS o
        WHERE o.sequence_key IS NOT NULL AND o.parked_on IS DISTINCT FROM ''
          AND o.state NOT IN ('succeeded', 'cancelled', 'superseded');
    ELSIF EXISTS (SELECT 1 FROM new_rows AS n
                  WHERE n.sequence_key IS NOT NULL AND n.state IN ('succeeded', 'cancelled', 'superseded')) THEN
        SELECT array_agg(o.tenant), array_agg(o.sequence_key)
        INTO tenants, keys
        FROM old_rows AS o
        JOIN new_rows AS n ON n.job_id = o.job_id
        WHERE o.sequence_key IS NOT NULL AND o.parked_on IS DISTINCT FROM ''
          AND o.state NOT IN ('succeeded', 'cancelled', 'superseded')
          AND n.state IN ('succeeded', 'cancelled', 'superseded');
    END IF;
    IF tenants IS NOT NULL THEN
        PERFORM jobs_sequence_release_next(tenants, keys);
    END IF;
    RETURN NULL;
END
$$;

-- A job of a sequence reopened (a retry): it waits again if another job of the sequence is its head.
CREATE OR REPLACE FUNCTION jobs_sequence_rejoin() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(jobs_key_lock_id('sequence', NEW.tenant, NEW.sequence_key));
    IF jobs_sequence_hold(NEW.tenant, NEW.sequence_key, NEW.job_id, true) THEN
        NEW.parked_on := '';
    ELSIF NEW.parked_on = '' THEN
        NEW.parked_on := NULL;
    END IF;
    RETURN NEW;
END
$$;
