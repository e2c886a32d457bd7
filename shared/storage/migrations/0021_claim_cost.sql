-- The claim's admission in fewer passes over its candidates. 0017 read the candidate rows four times
-- before and while claiming them: once for the keys their kinds declare, once per operator limit for the
-- keys they carry, once for their own bounds, and once more to compute the keys recorded by the update.
-- Now one statement reads them once for all of that, and when nothing bounds them (the usual case) one
-- UPDATE locks, claims and records them, as the FIFO claim before 0017 did. What is decided is unchanged:
-- the same keys bound the same candidates, counted under the same locks when any does.
-- The keys a kind declares, from the map the claim read once (kind -> keys). The claim calls it only for
-- kinds in the map (a function with a subquery is not inlined, and most kinds declare nothing).
CREATE FUNCTION jobs_declared_keys(kind_keys jsonb, kind text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY(SELECT jsonb_array_elements_text(kind_keys -> kind)) $$;

CREATE OR REPLACE FUNCTION jobs_claim_admit(worker_id text, lease_seconds double precision, max_jobs integer,
                                            candidate_ids uuid[])
    RETURNS TABLE (job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer,
                   fencing_token bigint, lease_expires_at timestamptz, created_at timestamptz,
                   queued_since timestamptz, claimed_at timestamptz, traceparent text, tracestate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    -- Planned per call, not with the caller's generic plans: its batches range from one row to thousands.
    SET plan_cache_mode = auto
    SET enable_seqscan = off
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
    -- Per key a candidate bounds itself, the smallest such bound.
    own_bound_of jsonb;
    fits boolean;
    n integer;
    at timestamptz;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_claim_admit counts running jobs with a snapshot per statement: READ COMMITTED only';
    END IF;
    -- Candidates are found by their key only. Their state is compared as text (`state::text IN (...)`),
    -- which no partial index's predicate matches: on statistics taken while the queue was empty (after a
    -- quiet night's VACUUM ANALYZE) the planner otherwise read every runnable row, through
    -- jobs_runnable_idx, for each candidate. With sequential scans off there is no other way but the key.
    -- One read of the candidates: the keys their kinds declare (read once, so the keys checked are the
    -- keys the claimed row records), and the keys that bound a start among all they carry: an operator's
    -- limit in force, or a submission's own bound.
    WITH cand AS MATERIALIZED (
        SELECT j.kind, j.tenant, j.limit_keys, j.limit_key_bounds
        FROM jobs AS j
        WHERE j.job_id = ANY (candidate_ids)
    ), declared AS MATERIALIZED (
        SELECT jk.kind, jk.limit_keys
        FROM job_kinds AS jk
        WHERE jk.limit_keys <> '{}' AND jk.kind IN (SELECT cd.kind FROM cand AS cd)
    ), carried AS (
        SELECT 'kind:' || cd.kind AS key FROM cand AS cd
        UNION SELECT 'tenant:' || cd.tenant FROM cand AS cd
        UNION SELECT unnest(cd.limit_keys) FROM cand AS cd
        UNION SELECT unnest(d.limit_keys) FROM declared AS d
    )
    SELECT (SELECT coalesce(jsonb_object_agg(d.kind, to_jsonb(d.limit_keys)), '{}') FROM declared AS d),
           (SELECT coalesce(array_agg(DISTINCT b.key ORDER BY b.key), '{}')
            FROM (SELECT l.key FROM job_limits AS l
                  WHERE (l.max_running > 0 OR l.rate_per_second > 0) AND l.key IN (SELECT ck.key FROM carried AS ck)
                  UNION
                  SELECT o.key FROM cand AS cd, unnest(cd.limit_keys, cd.limit_key_bounds) AS o(key, bound)
                  WHERE o.bound > 0) AS b),
           (SELECT coalesce(jsonb_object_agg(m.key, m.bound), '{}')
            FROM (SELECT o.key, min(o.bound) AS bound
                  FROM cand AS cd, unnest(cd.limit_keys, cd.limit_key_bounds) AS o(key, bound)
                  WHERE o.bound > 0
                  GROUP BY o.key) AS m)
    INTO kind_keys, bounded, own_bound_of;

    IF cardinality(bounded) > 0 THEN
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

        -- When some bound could be reached within one batch, each candidate is decided in turn; otherwise
        -- (the usual case of a limit that is far from full) any runnable candidates fit, as when nothing
        -- bounds them.
        IF EXISTS (SELECT 1 FROM unnest(bounded) AS b(key)
                   WHERE (max_of ? b.key
                          AND coalesce((running ->> b.key)::integer, 0) + max_jobs > (max_of ->> b.key)::integer)
                      OR (tokens_of ? b.key AND max_jobs > (tokens_of ->> b.key)::integer)
                      OR (own_bound_of ? b.key
                          AND coalesce((running ->> b.key)::integer, 0) + max_jobs > (own_bound_of ->> b.key)::integer))
        THEN
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
                WHERE j.job_id = c.job_id AND j.state::text IN ('pending', 'retry_wait') AND j.run_after <= clock_timestamp()
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
            -- The rows admitted above are this transaction's already: the claim below takes exactly them.
            candidate_ids := admitted;
        END IF;
    END IF;

    -- One statement locks the candidates in their order (skipping rows other claimers hold), claims them
    -- with the keys they hold, and takes from each rate-limited key the tokens its claimed jobs use.
    RETURN QUERY
    WITH admitted_rows AS (
        SELECT j.job_id
        FROM unnest(candidate_ids) WITH ORDINALITY AS u(job_id, ord)
        JOIN jobs AS j ON j.job_id = u.job_id
        WHERE j.state::text IN ('pending', 'retry_wait') AND j.run_after <= clock_timestamp()
          AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
        ORDER BY u.ord
        LIMIT max_jobs
        FOR UPDATE OF j SKIP LOCKED
    ), claimed AS (
        UPDATE jobs AS j
        SET state = 'running',
            attempts = j.attempts + 1,
            fencing_token = j.fencing_token + 1,
            lease_owner = worker_id,
            lease_expires_at = clock_timestamp() + make_interval(secs => lease_seconds),
            started_at = clock_timestamp(),
            running_keys = jobs_effective_keys(j.tenant, j.kind, CASE WHEN kind_keys ? j.kind
                                                                THEN jobs_declared_keys(kind_keys, j.kind) END,
                                           j.limit_keys),
            transition_actor = 'worker:' || worker_id,
            transition_reason = 'claimed'
        FROM admitted_rows AS a
        WHERE j.job_id = a.job_id
        RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
                  j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at) AS queued_since,
                  j.started_at, j.traceparent, j.tracestate, j.running_keys
    ), taken AS (
        SELECT rk.key, count(*) AS n
        FROM claimed AS cl, unnest(cl.running_keys) AS rk(key)
        WHERE cardinality(bounded) > 0 AND rk.key = ANY (bounded)
        GROUP BY rk.key
    ), charged AS (
        -- Tokens taken from each rate-limited key, by the clock the room was computed with.
        INSERT INTO job_key_state AS s (key, tokens, refilled_at)
        SELECT l.key, jobs_bucket_tokens(l.rate_per_second, l.burst, s0.tokens, s0.refilled_at, at) - t.n, at
        FROM taken AS t
        JOIN job_limits AS l ON l.key = t.key
        LEFT JOIN job_key_state AS s0 ON s0.key = l.key
        WHERE l.rate_per_second > 0
        ON CONFLICT (key) DO UPDATE SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at
    )
    SELECT cl.job_id, cl.tenant, cl.kind, cl.payload, cl.attempts, cl.max_attempts, cl.fencing_token,
           cl.lease_expires_at, cl.created_at, cl.queued_since, cl.started_at, cl.traceparent, cl.tracestate
    FROM claimed AS cl;
END
$$;

-- The dependents' rules of 0020, unchanged, behind a guard that costs the statements ending nothing
-- nobody waits for two probes instead of a planned join of the transition tables.
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

-- The whole claim as one function: the candidate search of 0017, read again past the rows that racing
-- claimers hold (below), and jobs_claim_admit deciding. Its settings keep the plan cheap and right:
-- - one generic plan per session instead of a plan per call: as a statement of its own, its parameters
--   made PostgreSQL plan it afresh at every claim, 0.7 ms, more than running it for a small batch;
-- - no sorts or sequential scans where an index will do: a plan made on statistics that lag the queue (a
--   burst lands between two autoanalyze runs, a tenant is new, or the plan was made while the table was
--   nearly empty) read a tenant's whole queue through jobs_tenant_queued_idx and sorted it, 5,850 rows for
--   19 candidates, at every claim; the candidates now come in order from jobs_runnable_idx and the scan
--   stops at the batch. The sorts it cannot do without (the fair order over the candidates) are made;
-- - just-in-time compilation is off: estimates on a long backlog could cross its threshold, 40 ms a claim.
-- jobs_claim_admit plans per call (its batches range from one row to thousands), whatever the caller says.
CREATE FUNCTION jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer,
                           claim_lease_seconds double precision)
    RETURNS TABLE (job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer,
                   fencing_token bigint, lease_expires_at timestamptz, created_at timestamptz,
                   queued_since timestamptz, claimed_at timestamptz, traceparent text, tracestate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    SET plan_cache_mode = force_generic_plan
    SET enable_sort = off
    SET enable_seqscan = off
    SET jit = off
    AS $$
#variable_conflict use_column
DECLARE
    candidate_ids uuid[];
    passed_over uuid[] := '{}';
    claimed integer := 0;
    admitted integer;
    rounds integer := 1;
BEGIN
    LOOP
        WITH RECURSIVE running AS (
            -- Keys of running jobs with their counts, for the limits on running jobs and the submissions' own
            -- bounds: read only when one of those is in force, since it scans every running job.
            SELECT rk AS key, count(*) AS n
            FROM jobs AS j, unnest(j.running_keys) AS rk
            WHERE j.state = 'running'
            GROUP BY rk
        ), blocked AS (
            -- Keys nothing may start under now. Read without locks: a filter only; jobs_claim_admit decides.
            SELECT array_agg(b.key) AS keys
            FROM (SELECT s.key FROM job_key_state AS s WHERE s.held_until > clock_timestamp()
                  UNION
                  SELECT l.key
                  FROM job_limits AS l
                  LEFT JOIN job_key_state AS s ON s.key = l.key
                  WHERE CASE WHEN l.max_running > 0
                             THEN coalesce((SELECT r.n FROM running AS r WHERE r.key = l.key), 0) >= l.max_running
                             ELSE false END
                     OR (l.rate_per_second > 0
                         AND jobs_bucket_tokens(l.rate_per_second, l.burst, s.tokens, s.refilled_at, clock_timestamp()) < 1)
                 ) AS b
        ), open_kinds AS (
            SELECT k.kind
            FROM unnest(claim_kinds::text[]) AS k(kind)
            LEFT JOIN job_kinds AS jk ON jk.kind = k.kind
            CROSS JOIN blocked AS b
            WHERE NOT EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = k.kind)
              AND NOT coalesce(('kind:' || k.kind) = ANY (b.keys) OR jk.limit_keys && b.keys, false)
        ), tenants AS (
            -- Per open kind, each tenant with runnable rows: one index descent per tenant, however long its queue.
            SELECT o.kind, (SELECT j.tenant FROM jobs AS j
                            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = o.kind
                            ORDER BY j.tenant LIMIT 1) AS tenant
            FROM open_kinds AS o
            UNION ALL
            SELECT t.kind, (SELECT j.tenant FROM jobs AS j
                            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = t.kind AND j.tenant > t.tenant
                            ORDER BY j.tenant LIMIT 1)
            FROM tenants AS t
            WHERE t.tenant IS NOT NULL
        ), candidates AS (
            SELECT c.job_id, c.tenant, c.priority, c.run_after
            FROM tenants AS t
            CROSS JOIN blocked AS b
            CROSS JOIN LATERAL (
                SELECT j.job_id, j.tenant, j.priority, j.run_after
                FROM jobs AS j
                WHERE j.state IN ('pending', 'retry_wait') AND j.kind = t.kind AND j.tenant = t.tenant
                  AND j.run_after <= clock_timestamp()
                  AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                  AND (j.limit_keys = '{}'
                       OR (NOT coalesce(j.limit_keys && b.keys, false)
                           AND NOT EXISTS (SELECT 1
                                           FROM unnest(j.limit_keys, j.limit_key_bounds) AS o(key, bound)
                                           JOIN running AS r ON r.key = o.key
                                           WHERE o.bound > 0 AND r.n >= o.bound)))
                  AND j.job_id <> ALL (passed_over)
                ORDER BY j.priority DESC, j.run_after, j.job_id
                LIMIT claim_limit - claimed
            ) AS c
            WHERE t.tenant IS NOT NULL AND NOT coalesce(('tenant:' || t.tenant) = ANY (b.keys), false)
        ), tenant_running AS (
            -- Each candidate tenant's running jobs, the first term of its share; counted only when candidates
            -- come from more than one tenant, since one tenant's candidates keep their order whatever it runs.
            SELECT j.tenant, count(*) AS n
            FROM jobs AS j
            WHERE j.state = 'running' AND j.tenant IN (SELECT c.tenant FROM candidates AS c)
              AND (SELECT count(DISTINCT c.tenant) FROM candidates AS c) > 1
            GROUP BY j.tenant
        ), ranked AS (
            -- A tenant's n-th candidate goes after every tenant whose running and earlier candidates weigh less.
            SELECT c.job_id, c.priority, c.run_after,
                   (coalesce(r.n, 0) + row_number() OVER (PARTITION BY c.tenant
                                                          ORDER BY c.priority DESC, c.run_after, c.job_id))::float8
                       / coalesce(w.weight, 1) AS share
            FROM candidates AS c
            LEFT JOIN tenant_running AS r ON r.tenant = c.tenant
            LEFT JOIN tenant_weights AS w ON w.tenant = c.tenant
        )
        -- Four times the batch: room for the rows racing claimers lock first, and for candidates a full key turns away.
        SELECT ARRAY(SELECT job_id FROM ranked ORDER BY priority DESC, share, run_after, job_id
                     LIMIT 4 * (claim_limit - claimed))
        INTO candidate_ids;
        RETURN QUERY SELECT a.* FROM jobs_claim_admit(claim_worker, claim_lease_seconds, claim_limit - claimed,
                                                      candidate_ids) AS a;
        GET DIAGNOSTICS admitted = ROW_COUNT;
        claimed := claimed + admitted;
        -- Claimers that read the same queue at once are offered the same candidates, and all but one find
        -- them locked: while candidates were passed over and the batch is not full, read on past them.
        -- Not after a round that may have locked keys: a later round's keys would be locked out of order.
        EXIT WHEN claimed >= claim_limit OR cardinality(candidate_ids) <= admitted OR rounds >= 4
               OR EXISTS (SELECT 1 FROM job_limits AS l WHERE l.max_running > 0 OR l.rate_per_second > 0)
               OR EXISTS (SELECT 1 FROM jobs AS j, unnest(j.limit_key_bounds) AS o(bound)
                          WHERE j.job_id = ANY (candidate_ids) AND o.bound > 0);
        passed_over := passed_over || candidate_ids;
        rounds := rounds + 1;
    END LOOP;
END
$$;

-- Job ids the database makes (submissions with a key, a version or dependencies) are time-ordered like
-- those the API makes (shared.domain.ids.new_job_ids): UUIDv7, 48 bits of Unix milliseconds, then
-- random bits, so inserts land on the same few pages of every index keyed by job id.
CREATE FUNCTION jobs_new_job_id() RETURNS uuid
    LANGUAGE sql VOLATILE
    AS $$
        SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                              PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                                              * 1000)::bigint) FROM 3)
                                              FROM 1 FOR 6),
                                      52, 1),
                              53, 1),
                      'hex')::uuid
    $$;
ALTER TABLE jobs ALTER COLUMN job_id SET DEFAULT jobs_new_job_id();

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_declared_keys(jsonb, text) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_new_job_id() OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_claim(text, text[], integer, double precision) OWNER TO jobs_migrator;
    END IF;
END $$;
