-- Fair shares and limits by key in the claim (docs/SCHEDULING.md). The operators' settings are in 0015;
-- this adds what the claim itself keeps: the keys each job carries, the keys a running job holds, and per
-- key the token bucket and a provider's hold. Running counts are not maintained: the claim counts running
-- rows under a lock per key, so every way a job stops running (complete, fail, release, lease expiry,
-- supersede, an operator's bulk action) frees its slot without any statement knowing about limits.

-- Keys a submission added (already scoped: `tenant:<t>/<name>`), each with the bound its submission gave
-- (0: none of its own); and the full set of keys the job carried when it was last claimed.
ALTER TABLE jobs ADD COLUMN limit_keys text[] NOT NULL DEFAULT '{}',
                 ADD COLUMN limit_key_bounds integer[] NOT NULL DEFAULT '{}',
                 ADD COLUMN running_keys text[] NOT NULL DEFAULT '{}',
                 ADD CONSTRAINT jobs_limit_key_bounds_match
                     CHECK (cardinality(limit_keys) = cardinality(limit_key_bounds));

-- The claim walks runnable rows per kind, then per tenant (a skip scan), then in each tenant's own order.
-- Same name and predicate as before, so finished history still costs the claim nothing.
DROP INDEX jobs_runnable_idx;
CREATE INDEX jobs_runnable_idx ON jobs (kind, tenant, priority DESC, run_after, job_id)
    WHERE state IN ('pending', 'retry_wait');

-- Per key: the token bucket (tokens left at refilled_at) and a hold until a time (provider pushback).
-- Only rate-limited and held keys get a row.
CREATE TABLE job_key_state (
    key         text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 200),
    tokens      double precision,
    refilled_at timestamptz,
    held_until  timestamptz
);

-- The keys a job carries: its kind, its tenant, the keys its kind declares, and its submission's own.
CREATE FUNCTION jobs_effective_keys(tenant text, kind text, kind_keys text[], own_keys text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY['kind:' || kind, 'tenant:' || tenant] || coalesce(kind_keys, '{}') || own_keys $$;

-- Tokens in a bucket now: refilled by the database clock since it was last taken from, never over burst.
CREATE FUNCTION jobs_bucket_tokens(rate double precision, burst integer, tokens double precision,
                                   refilled_at timestamptz, at timestamptz) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT CASE WHEN tokens IS NULL THEN burst::double precision
                    ELSE least(burst::double precision,
                               tokens + rate * greatest(0, extract(epoch FROM at - refilled_at)::double precision))
               END
    $$;

-- Provider pushback: every job carrying `key` waits until `until` (a later hold wins, an earlier one is
-- kept); returns the hold in force.
CREATE FUNCTION jobs_hold_key(hold_key text, hold_until timestamptz) RETURNS timestamptz
    LANGUAGE sql VOLATILE
    AS $$
        INSERT INTO job_key_state AS s (key, held_until) VALUES (hold_key, hold_until)
        ON CONFLICT (key) DO UPDATE
            SET held_until = greatest(coalesce(s.held_until, EXCLUDED.held_until), EXCLUDED.held_until)
        RETURNING held_until
    $$;

-- The named jobs in the order given, with every key each carries (kind keys from the map given).
CREATE FUNCTION jobs_claim_candidates(candidate_ids uuid[], kind_keys jsonb)
    RETURNS TABLE (ord bigint, job_id uuid, keys text[], own_keys text[], own_bounds integer[])
    LANGUAGE sql STABLE
    SET search_path = public, pg_temp
    AS $$
        SELECT u.ord, j.job_id,
               jobs_effective_keys(j.tenant, j.kind,
                                   ARRAY(SELECT jsonb_array_elements_text(coalesce(kind_keys -> j.kind, '[]'))),
                                   j.limit_keys),
               j.limit_keys, j.limit_key_bounds
        FROM unnest(candidate_ids) WITH ORDINALITY AS u(job_id, ord)
        JOIN jobs AS j ON j.job_id = u.job_id
    $$;

-- The second half of the claim: takes the candidates in their fair order and claims up to `max_jobs` of
-- them whose every bounded key has room. Room is decided after locking each bounded key (an advisory lock
-- per key, taken in hash order so claimers cannot deadlock) and counting the running rows that carry it
-- in a statement begun after the lock: every claimer that started a job of the key before committed
-- first, so its job is counted. Candidates whose row another claimer holds are skipped, never waited for.
-- A new snapshot per statement is what makes this correct, so it runs in READ COMMITTED only.
CREATE FUNCTION jobs_claim_admit(worker_id text, lease_seconds double precision, max_jobs integer,
                                 candidate_ids uuid[])
    RETURNS TABLE (job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer,
                   fencing_token bigint, lease_expires_at timestamptz, created_at timestamptz,
                   queued_since timestamptz, claimed_at timestamptz, traceparent text, tracestate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    c record;
    k text;
    kind_keys jsonb;
    bounded text[];
    running jsonb;
    used jsonb := '{}';
    limit_row record;
    max_of jsonb := '{}';
    tokens_of jsonb := '{}';
    admitted uuid[] := '{}';
    fits boolean;
    n integer;
    at timestamptz;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_claim_admit counts running jobs with a snapshot per statement: READ COMMITTED only';
    END IF;
    -- Read once, so the keys checked are the keys the claimed row records.
    SELECT coalesce(jsonb_object_agg(jk.kind, to_jsonb(jk.limit_keys)), '{}') INTO kind_keys
    FROM job_kinds AS jk
    WHERE jk.limit_keys <> '{}' AND jk.kind IN (SELECT j.kind FROM jobs AS j WHERE j.job_id = ANY (candidate_ids));

    -- The keys that bound a start: an operator's limit, or a submission's own bound.
    SELECT coalesce(array_agg(DISTINCT b.key ORDER BY b.key), '{}') INTO bounded
    FROM (SELECT l.key FROM job_limits AS l
          WHERE (l.max_running > 0 OR l.rate_per_second > 0)
            AND EXISTS (SELECT 1 FROM jobs_claim_candidates(candidate_ids, kind_keys) AS cc WHERE l.key = ANY (cc.keys))
          UNION
          SELECT o.key FROM jobs AS j, unnest(j.limit_keys, j.limit_key_bounds) AS o(key, bound)
          WHERE j.job_id = ANY (candidate_ids) AND o.bound > 0) AS b;

    IF cardinality(bounded) = 0 THEN
        -- Nothing bounds these candidates (the usual case): every one that is still runnable fits, so
        -- they are locked in one statement, in their fair order, skipping the rows other claimers hold.
        SELECT coalesce(array_agg(x.job_id ORDER BY x.ord), '{}') INTO admitted
        FROM (SELECT j.job_id, u.ord
              FROM unnest(candidate_ids) WITH ORDINALITY AS u(job_id, ord)
              JOIN jobs AS j ON j.job_id = u.job_id
              WHERE j.state IN ('pending', 'retry_wait') AND j.run_after <= clock_timestamp()
                AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
              ORDER BY u.ord
              LIMIT max_jobs
              FOR UPDATE OF j SKIP LOCKED) AS x;
    ELSE
        FOR k IN SELECT b.key FROM unnest(bounded) AS b(key) ORDER BY hashtext(b.key), b.key LOOP
            PERFORM pg_advisory_xact_lock(18, hashtext(k));
        END LOOP;

        -- Counted after the locks, in this statement's own snapshot.
        SELECT coalesce(jsonb_object_agg(r.key, r.n), '{}') INTO running
        FROM (SELECT rk AS key, count(*) AS n
              FROM jobs AS j, unnest(j.running_keys) AS rk
              WHERE j.state = 'running' AND rk = ANY (bounded)
              GROUP BY rk) AS r;

        at := clock_timestamp();
        FOR limit_row IN
            SELECT l.key, l.max_running, l.rate_per_second, l.burst, s.tokens, s.refilled_at
            FROM job_limits AS l LEFT JOIN job_key_state AS s ON s.key = l.key
            WHERE l.key = ANY (bounded)
        LOOP
            IF limit_row.max_running > 0 THEN
                max_of := max_of || jsonb_build_object(limit_row.key, limit_row.max_running);
            END IF;
            IF limit_row.rate_per_second > 0 THEN
                tokens_of := tokens_of || jsonb_build_object(limit_row.key, floor(jobs_bucket_tokens(
                    limit_row.rate_per_second, limit_row.burst, limit_row.tokens, limit_row.refilled_at, at)));
            END IF;
        END LOOP;

        FOR c IN SELECT * FROM jobs_claim_candidates(candidate_ids, kind_keys) AS cc ORDER BY cc.ord LOOP
            EXIT WHEN cardinality(admitted) >= max_jobs;
            fits := true;
            FOREACH k IN ARRAY c.keys LOOP
                CONTINUE WHEN NOT k = ANY (bounded);
                n := coalesce((running ->> k)::integer, 0) + coalesce((used ->> k)::integer, 0);
                IF (max_of ? k AND n >= (max_of ->> k)::integer)
                   OR (tokens_of ? k AND coalesce((used ->> k)::integer, 0) >= (tokens_of ->> k)::integer)
                   OR EXISTS (SELECT 1 FROM unnest(c.own_keys, c.own_bounds) AS o(key, bound)
                              WHERE o.key = k AND o.bound > 0 AND n >= o.bound) THEN
                    fits := false;
                    EXIT;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT fits;
            PERFORM 1 FROM jobs AS j
            WHERE j.job_id = c.job_id AND j.state IN ('pending', 'retry_wait') AND j.run_after <= clock_timestamp()
              AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            admitted := admitted || c.job_id;
            FOREACH k IN ARRAY c.keys LOOP
                IF k = ANY (bounded) THEN
                    used := used || jsonb_build_object(k, coalesce((used ->> k)::integer, 0) + 1);
                END IF;
            END LOOP;
        END LOOP;

        -- Tokens taken from each rate-limited key, by the clock the room was computed with.
        INSERT INTO job_key_state AS s (key, tokens, refilled_at)
        SELECT l.key,
               jobs_bucket_tokens(l.rate_per_second, l.burst, s0.tokens, s0.refilled_at, at)
                   - coalesce((used ->> l.key)::integer, 0),
               at
        FROM job_limits AS l LEFT JOIN job_key_state AS s0 ON s0.key = l.key
        WHERE l.key = ANY (bounded) AND l.rate_per_second > 0 AND used ? l.key
        ON CONFLICT (key) DO UPDATE SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at;
    END IF;

    RETURN QUERY
    UPDATE jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        fencing_token = j.fencing_token + 1,
        lease_owner = worker_id,
        lease_expires_at = clock_timestamp() + make_interval(secs => lease_seconds),
        started_at = clock_timestamp(),
        running_keys = cc.keys,
        transition_actor = 'worker:' || worker_id,
        transition_reason = 'claimed'
    FROM jobs_claim_candidates(admitted, kind_keys) AS cc
    WHERE j.job_id = cc.job_id
    RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
              j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at), j.started_at,
              j.traceparent, j.tracestate;
END
$$;

-- Why a runnable job is not being claimed, when a pause, a hold or a full limit is the reason; no row
-- when none is. Computed on read: nothing is stored per waiting job. It runs as its owner because a
-- key's running jobs are every tenant's; the job itself is looked up only within the caller's tenant
-- (jobs_tenant_visible), and what comes back of the others is whether the key is full.
CREATE FUNCTION jobs_waiting_reason(for_job uuid)
    RETURNS TABLE (reason text, key text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$
        WITH job AS (
            SELECT j.job_id, j.kind, jobs_effective_keys(j.tenant, j.kind, jk.limit_keys, j.limit_keys) AS keys,
                   j.limit_keys AS own_keys, j.limit_key_bounds AS own_bounds
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
            SELECT 0 AS ord, 'kind_paused' AS reason, 'kind:' || job.kind AS key
            FROM job WHERE EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = job.kind)
            UNION ALL
            SELECT c.ord, CASE
                WHEN s.held_until > clock_timestamp() THEN 'key_held'
                WHEN (l.max_running > 0 AND coalesce(r.n, 0) >= l.max_running)
                     OR (c.own_bound > 0 AND coalesce(r.n, 0) >= c.own_bound) THEN 'limit_running'
                WHEN l.rate_per_second > 0
                     AND jobs_bucket_tokens(l.rate_per_second, l.burst, s.tokens, s.refilled_at,
                                            clock_timestamp()) < 1 THEN 'limit_rate'
                END, c.key
            FROM carried AS c
            LEFT JOIN job_limits AS l ON l.key = c.key
            LEFT JOIN job_key_state AS s ON s.key = c.key
            LEFT JOIN running AS r ON r.key = c.key
        )
        SELECT reason, key FROM reasons WHERE reason IS NOT NULL ORDER BY ord LIMIT 1
    $$;

-- Jobs already running when this migration runs hold the keys they would be claimed with now.
UPDATE jobs AS j
SET running_keys = jobs_effective_keys(j.tenant, j.kind, (SELECT jk.limit_keys FROM job_kinds AS jk
                                                          WHERE jk.kind = j.kind), j.limit_keys)
WHERE j.state = 'running';

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_key_state OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_effective_keys(text, text, text[], text[]) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_bucket_tokens(double precision, integer, double precision, timestamptz, timestamptz)
            OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_hold_key(text, timestamptz) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_claim_candidates(uuid[], jsonb) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_claim_admit(text, double precision, integer, uuid[]) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_waiting_reason(uuid) OWNER TO jobs_migrator;
    END IF;
END $$;

-- Workers claim (and so take tokens); the API holds keys on a provider's pushback and reads why a job waits.
GRANT SELECT, INSERT, UPDATE ON job_key_state TO jobs_worker, jobs_api;
-- The claim records the keys a job holds while it runs; the keys it carries stay the submission's.
GRANT UPDATE (running_keys) ON jobs TO jobs_worker;
REVOKE ALL ON FUNCTION jobs_waiting_reason(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_waiting_reason(uuid) TO jobs_api;
