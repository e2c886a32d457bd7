-- Limits by key: the keys a job carries, the token buckets of rate limits, holds on a pushed-back key, why a job waits.
-- after: 0041_sequences_singletons_debounce

-- The keys a job carries: its kind, its tenant, the keys its kind declares, and its submission's own.
CREATE OR REPLACE FUNCTION jobs_effective_keys(tenant text, kind text, kind_keys text[], own_keys text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY[jobs_kind_key(kind), jobs_tenant_key(tenant)] || coalesce(kind_keys, '{}') || own_keys $$;

-- The keys a kind declares, from the map the claim read once (kind -> keys). The claim calls it only for
-- kinds in the map (a function with a subquery is not inlined, and most kinds declare nothing).
CREATE OR REPLACE FUNCTION jobs_declared_keys(kind_keys jsonb, kind text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY(SELECT jsonb_array_elements_text(kind_keys -> kind)) $$;

-- Tokens in a bucket now: refilled by the database clock since it was last taken from, never over burst.
CREATE OR REPLACE FUNCTION jobs_bucket_tokens(rate double precision, burst integer, tokens double precision,
                                   refilled_at timestamptz, at timestamptz) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT CASE WHEN tokens IS NULL THEN burst::double precision
                    ELSE least(burst::double precision,
                               tokens + rate * greatest(0, extract(epoch FROM at - refilled_at)::double precision))
               END
    $$;

-- A key's tokens at `at`: its bucket (jobs_bucket_tokens) less the charges not yet folded into it. In
-- PL/pgSQL, whose plans last the session: an SQL function with a subquery is not inlined, and its query
-- was planned again in every statement calling it (0.5 ms in each of the claim's counts).
CREATE OR REPLACE FUNCTION jobs_key_tokens(of_key text, rate double precision, burst integer, tokens double precision,
                                refilled_at timestamptz, at timestamptz) RETURNS double precision
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN jobs_bucket_tokens(rate, burst, tokens, refilled_at, at)
           - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c WHERE c.key = of_key), 0);
END
$$;

-- Provider pushback: every job carrying `key` waits until `until` (a later hold wins, an earlier one is
-- kept); returns the hold in force.
CREATE OR REPLACE FUNCTION jobs_hold_key(hold_key text, hold_until timestamptz) RETURNS timestamptz
    LANGUAGE sql VOLATILE
    AS $$
        INSERT INTO job_key_state AS s (key, held_until) VALUES (hold_key, hold_until)
        ON CONFLICT (key) DO UPDATE
            SET held_until = greatest(coalesce(s.held_until, EXCLUDED.held_until), EXCLUDED.held_until)
        RETURNING held_until
    $$;

-- The charges claims make under a key's shared lock, folded into its bucket. Left to the claims, a key
-- whose burst dwarfs its use would keep a row for every backend that ever charged it (a pooled connection
-- that is replaced is a new backend), summed by every claim under the key, every GetJob reason and every
-- scrape of the saturation gauge. So the workers' sweep folds every charged key at each sweep interval,
-- one key per transaction. It locks the key
-- alone, which waits for the claims holding it shared to commit and holds new ones off for the moment of
-- the fold, sets the bucket to the tokens it had as read at that moment (the bucket less the charges) and
-- deletes the charges: the tokens a claim may take are the same before and after. Charges to a key no
-- longer rate-limited are deleted, since nothing reads them.
CREATE OR REPLACE FUNCTION jobs_fold_key_charges(of_key text) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    at timestamptz;
    folded bigint;
BEGIN
    -- The lock every claim takes on the key (jobs_claim, jobs_claim_admit), held alone.
    PERFORM pg_advisory_xact_lock(18, hashtext(of_key));
    at := clock_timestamp();
    INSERT INTO job_key_state (key)
    SELECT l.key
    FROM job_limits AS l
    WHERE l.key = of_key AND l.rate_per_second > 0
      AND NOT EXISTS (SELECT 1 FROM job_key_state AS s WHERE s.key = l.key)
    ON CONFLICT (key) DO NOTHING;
    UPDATE job_key_state AS s
    SET tokens = jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at),
        refilled_at = at
    FROM job_limits AS l
    WHERE s.key = l.key AND l.key = of_key AND l.rate_per_second > 0;
    WITH gone AS (
        DELETE FROM job_key_charges AS c WHERE c.key = of_key RETURNING c.taken
    )
    SELECT coalesce(sum(g.taken), 0) INTO folded FROM gone AS g;
    RETURN folded;
END
$$;

-- Why a runnable job waits, if it does: its turn in its sequence (the head halted, or still to end), its
-- kind paused, or the first of its keys held, full or out of tokens. Nothing for another tenant's job.
CREATE OR REPLACE FUNCTION jobs_waiting_reason(for_job uuid)
    RETURNS TABLE (reason text, key text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
        WITH job AS (
            SELECT j.job_id, j.kind, jobs_effective_keys(j.tenant, j.kind, jk.limit_keys, j.limit_keys) AS keys,
                   j.limit_keys AS own_keys, j.limit_key_bounds AS own_bounds, j.tenant, j.sequence_key,
                   j.parked_on = '' AS in_sequence_queue
            FROM jobs AS j LEFT JOIN job_kinds AS jk ON jk.kind = j.kind
            WHERE j.job_id = for_job AND jobs_tenant_visible(j.tenant)
              AND j.state IN ('pending', 'retry_wait') AND j.run_after <= clock_timestamp()
        ), carried AS (
            SELECT k.key, k.ord, coalesce(o.bound, 0) AS own_bound
            FROM job, unnest(job.keys) WITH ORDINALITY AS k(key, ord)
            LEFT JOIN unnest(job.own_keys, job.own_bounds) AS o(key, bound) ON o.key = k.key
        ), running AS (
            SELECT rk AS key, count(*) AS n
            FROM jobs AS j, unnest(j.running_keys) AS rk
            WHERE j.state = 'running' AND rk IN (SELECT key FROM carried)
            GROUP BY rk
        ), reasons AS (
            -- A job waiting in its sequence: halted when the sequence's first unfinished job failed or
            -- its outcome is unknown.
            SELECT -1 AS ord,
                   CASE WHEN (SELECT h.state IN ('failed', 'outcome_unknown')
                              FROM jobs AS h
                              WHERE h.tenant = job.tenant AND h.sequence_key = job.sequence_key
                                AND h.state NOT IN ('succeeded', 'cancelled', 'superseded')
                              ORDER BY h.sequence_position
                              LIMIT 1)
                        THEN 'sequence_halted' ELSE 'sequence_waiting' END AS reason,
                   job.sequence_key AS key
            FROM job WHERE job.in_sequence_queue
            UNION ALL
            SELECT 0 AS ord, 'kind_paused' AS reason, jobs_kind_key(job.kind) AS key
            FROM job WHERE EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = job.kind)
            UNION ALL
            SELECT c.ord, CASE
                WHEN s.held_until > clock_timestamp() THEN 'key_held'
                WHEN (l.max_running > 0 AND coalesce(r.n, 0) >= l.max_running)
                     OR (c.own_bound > 0 AND coalesce(r.n, 0) >= c.own_bound) THEN 'limit_running'
                WHEN l.rate_per_second > 0
                     AND jobs_key_tokens(c.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at,
                                         clock_timestamp()) < 1 THEN 'limit_rate'
                END, c.key
            FROM carried AS c
            LEFT JOIN job_limits AS l ON l.key = c.key
            LEFT JOIN job_key_state AS s ON s.key = c.key
            LEFT JOIN running AS r ON r.key = c.key
        )
        SELECT reason, key FROM reasons WHERE reason IS NOT NULL ORDER BY ord LIMIT 1
    $$;
