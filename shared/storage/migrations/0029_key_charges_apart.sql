-- Claims that share a key's lock no longer charge its tokens one after another. Every claim under a rate
-- limit updated the key's one row in job_key_state, so a claim holding the key shared (room to spare,
-- 0022) waited at that row for the claim before it to commit: four claimers draining four tenants under
-- limits spent 5.6% of their time in those row-lock waits (1.1% without limits). Now a claim holding the
-- key shared adds what it takes to a row of its own backend (job_key_charges), which no other claim
-- writes, and a key's tokens are its bucket less those charges (jobs_key_tokens), read so wherever a
-- bucket decides or explains. A claim that locks the key exclusively (a key near its bound) charges the
-- bucket as before and folds the charges into it; none is being added then, since adding takes the
-- shared lock. The charges are subtracted from the bucket as refilled up to its burst, as if no refill
-- had come after them: never more tokens than the bucket would hold, fewer while charges wait to be
-- folded, and once fewer than a shared lock needs, the next claim locks exclusively and folds them.
-- Measured on the drain of four tenants under limits (alternating fresh databases, medians of six):
-- 9,370 -> 10,216 jobs/s; the lock waits 5.6% -> 1.3%.
--
-- And the claim's first judgment of its keys' room (0026's floor) comes from what the session's last
-- claim counted. The judgment only chooses how a claim locks each key of its limits. A key locked shared is taken by the
-- part of its room, counted after the lock, that every claim could take at once; so a key judged to have
-- more room than it has is claimed less, never more, and taking a key alone is always safe. The floor
-- counted every running job and read every bucket at every claim under limits, and the count under the
-- locks, a moment before in the same session, knew as much to within that moment's claims. Now that
-- count is remembered for the session (a setting, with its time), less the part the claim that made it
-- may take, and the next claim judges by it when it is younger than a second and has every key, by the
-- floor otherwise. What a claim may take is decided as before. A limit lowered within that second can
-- have the next claim lock its key shared and take its part of what is left instead of all of it, once.
-- The floor's two statements were 0.21 ms of a claim's 7.8 ms with four claimers busy; the drain of four
-- tenants under limits gained 5% and 2% in two runs of eight alternating pairs (medians of each side).
CREATE TABLE job_key_charges (
    key text NOT NULL,
    -- The charging backend's pid: one writer per row while it lives.
    holder integer NOT NULL,
    taken bigint NOT NULL CHECK (taken >= 0),
    PRIMARY KEY (key, holder)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON job_key_charges TO jobs_worker;
GRANT SELECT ON job_key_charges TO jobs_api;

-- A key's tokens at `at`: its bucket (jobs_bucket_tokens) less the charges not yet folded into it. In
-- PL/pgSQL, whose plans last the session: an SQL function with a subquery is not inlined, and its query
-- was planned again in every statement calling it (0.5 ms in each of the claim's counts).
CREATE FUNCTION jobs_key_tokens(of_key text, rate double precision, burst integer, tokens double precision,
                                refilled_at timestamptz, at timestamptz) RETURNS double precision
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN jobs_bucket_tokens(rate, burst, tokens, refilled_at, at)
           - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c WHERE c.key = of_key), 0);
END
$$;

-- Keeps the rooms a claim counted under its locks for the session's next judgment (a setting that
-- lasts the session), less what that claim may take of a key it holds shared (its part: the room
-- divided by max_connections), so that a key crossing that bound is judged short at the next claim.
-- In PL/pgSQL, planned once per session: as SQL, not inlined, it was planned at every call.
CREATE FUNCTION jobs_claim_rooms_remember(rooms jsonb, at timestamptz) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    holders integer := current_setting('max_connections')::integer;
BEGIN
    PERFORM set_config('jobs.claim_rooms',
                       jsonb_build_object('at', extract(epoch FROM at),
                                          'rooms', (SELECT coalesce(jsonb_object_agg(r.key, r.value::bigint
                                                                                         - r.value::bigint / holders),
                                                                    '{}')
                                                    FROM jsonb_each_text(rooms) AS r))::text,
                       false);
END
$$;

-- 0025's room, its tokens read through jobs_key_tokens, remembering what it found.
CREATE OR REPLACE FUNCTION jobs_claim_room(keys text[], at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    rooms jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job_limits AS l WHERE l.key = ANY (keys) AND l.max_running > 0) THEN
        SELECT coalesce(jsonb_object_agg(l.key, greatest(0,
                   floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)))), '{}')
        INTO rooms
        FROM job_limits AS l
        LEFT JOIN job_key_state AS s ON s.key = l.key
        WHERE l.key = ANY (keys) AND l.rate_per_second > 0;
        PERFORM jobs_claim_rooms_remember(rooms, at);
        RETURN rooms;
    END IF;
    WITH held AS (
        SELECT j.kind, j.tenant, j.running_keys[3:] AS extra, count(*) AS n
        FROM jobs AS j
        WHERE j.state = 'running'
        GROUP BY j.kind, j.tenant, j.running_keys[3:]
    ), running AS (
        SELECT k.key, sum(k.n) AS n
        FROM (SELECT 'kind:' || h.kind AS key, h.n FROM held AS h
              UNION ALL
              SELECT 'tenant:' || h.tenant, h.n FROM held AS h
              UNION ALL
              SELECT e.key, h.n FROM held AS h, unnest(h.extra) AS e(key)) AS k
        WHERE k.key = ANY (keys)
        GROUP BY k.key
    )
    SELECT coalesce(jsonb_object_agg(l.key, greatest(0, least(
               CASE WHEN l.max_running > 0 THEN l.max_running - coalesce(r.n, 0) END,
               CASE WHEN l.rate_per_second > 0
                    THEN floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)) END))),
           '{}')
    INTO rooms
    FROM job_limits AS l
    LEFT JOIN job_key_state AS s ON s.key = l.key
    LEFT JOIN running AS r ON r.key = l.key
    WHERE l.key = ANY (keys) AND (l.max_running > 0 OR l.rate_per_second > 0);
    PERFORM jobs_claim_rooms_remember(rooms, at);
    RETURN rooms;
END
$$;

-- 0026's floor, its tokens read through jobs_key_tokens, judging by the last count when it can.
CREATE OR REPLACE FUNCTION jobs_claim_room_floor(keys text[], at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    rooms jsonb;
    running bigint;
    remembered jsonb := nullif(current_setting('jobs.claim_rooms', true), '')::jsonb;
BEGIN
    -- The rooms this session's last claim counted under its locks, if it was a moment ago and counted
    -- every key asked for.
    IF remembered IS NOT NULL
       AND extract(epoch FROM at) - (remembered ->> 'at')::double precision BETWEEN 0 AND 1
       AND (remembered -> 'rooms') ?& keys THEN
        RETURN remembered -> 'rooms';
    END IF;
    IF EXISTS (SELECT 1 FROM job_limits AS l WHERE l.key = ANY (keys) AND l.max_running > 0) THEN
        -- Every running job, whatever keys it holds: no key has more.
        SELECT count(*) INTO running FROM jobs AS j WHERE j.state = 'running';
    END IF;
    SELECT coalesce(jsonb_object_agg(l.key, greatest(0, least(
               CASE WHEN l.max_running > 0 THEN l.max_running - running END,
               CASE WHEN l.rate_per_second > 0
                    THEN floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)) END))),
           '{}')
    INTO rooms
    FROM job_limits AS l
    LEFT JOIN job_key_state AS s ON s.key = l.key
    WHERE l.key = ANY (keys) AND (l.max_running > 0 OR l.rate_per_second > 0);
    RETURN rooms;
END
$$;

-- 0021's admission, its tokens read through jobs_key_tokens and the charges folded where it charges.
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
                tokens_of := tokens_of || jsonb_build_object(limit_row.key, floor(jobs_key_tokens(limit_row.key,
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
        SELECT l.key, jobs_key_tokens(l.key, l.rate_per_second, l.burst, s0.tokens, s0.refilled_at, at) - t.n, at
        FROM taken AS t
        JOIN job_limits AS l ON l.key = t.key
        LEFT JOIN job_key_state AS s0 ON s0.key = l.key
        WHERE l.rate_per_second > 0
        ON CONFLICT (key) DO UPDATE SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at
    ), folded AS (
        -- The charges of claims that held the key shared, counted in the tokens above (this statement's
        -- snapshot, which their deletion here does not change).
        DELETE FROM job_key_charges AS pending
        USING taken AS t
        WHERE pending.key = t.key
    )
    SELECT cl.job_id, cl.tenant, cl.kind, cl.payload, cl.attempts, cl.max_attempts, cl.fencing_token,
           cl.lease_expires_at, cl.created_at, cl.queued_since, cl.started_at, cl.traceparent, cl.tracestate
    FROM claimed AS cl;
END
$$;
-- 0026's claim, restated with the charges made by lock mode (the one part changed, at its end).
CREATE OR REPLACE FUNCTION jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer,
                           claim_lease_seconds double precision)
    RETURNS TABLE (job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer,
                   fencing_token bigint, lease_expires_at timestamptz, created_at timestamptz,
                   queued_since timestamptz, claimed_at timestamptz, traceparent text, tracestate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    -- The settings of jobs_claim_fair (0021), for the same reasons: one generic plan per session that
    -- reads the runnable index in its order and stops at the batch.
    SET plan_cache_mode = force_generic_plan
    SET enable_sort = off
    SET enable_seqscan = off
    SET jit = off
    AS $$
#variable_conflict use_column
DECLARE
    queue_kinds text[];
    queue_tenants text[];
    head_priorities integer[];
    head_ages timestamptz[];
    only_kind text;
    top_priority integer;
    declared text[];
    -- The keys every job of the batch carries whatever its tenant: its kind's and the ones the kind declares.
    kind_keys text[];
    -- The limits in force on keys every job of the batch carries (its kind's and its tenant's), in the
    -- order their locks are taken; and whether limits in force on other keys could bind a submission's own.
    limited text[];
    other_limits boolean;
    keys_locked boolean := false;
    limit_row record;
    key_rooms jsonb;
    holders integer;
    shared_keys text[] := '{}';
    at timestamptz;
    -- Room left under the limits, once counted: for every job of the batch, and per tenant.
    room integer;
    tenant_room jsonb := '{}';
    key_room integer;
    -- The tenants still taking part in the allocation, with their running jobs (this claim's included)
    -- and weights.
    live text[];
    running bigint[];
    weights integer[];
    all_running bigint[];
    all_weights integer[];
    shares_of text[];
    share_counts bigint[];
    locked_ids uuid[];
    locked_tenants text[];
    chosen_ids uuid[];
    chosen_tenants text[];
    got jsonb;
    -- Per limited key, the jobs this claim charges to it.
    charged_of jsonb;
    claimed_by_tenant jsonb := '{}';
    needs_admission boolean;
    claimed integer := 0;
    rounds integer := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM job_key_state AS s WHERE s.held_until > clock_timestamp()) THEN
        RETURN QUERY SELECT f.* FROM jobs_claim_fair(claim_worker, claim_kinds, claim_limit, claim_lease_seconds) AS f;
        RETURN;
    END IF;

    -- The queues with a job to claim now: per open kind, each tenant with runnable rows (one index descent
    -- per tenant, however long its queue), and the priority and age of its next job.
    WITH RECURSIVE open_kinds AS (
        SELECT k.kind
        FROM unnest(claim_kinds) AS k(kind)
        WHERE NOT EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = k.kind)
    ), tenants AS (
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
    )
    SELECT array_agg(t.kind ORDER BY t.kind, t.tenant), array_agg(t.tenant ORDER BY t.kind, t.tenant),
           array_agg(h.priority ORDER BY t.kind, t.tenant), array_agg(h.run_after ORDER BY t.kind, t.tenant)
    INTO queue_kinds, queue_tenants, head_priorities, head_ages
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT j.priority, j.run_after
        FROM jobs AS j
        WHERE j.state IN ('pending', 'retry_wait') AND j.kind = t.kind AND j.tenant = t.tenant
          AND j.run_after <= clock_timestamp()
          AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
        ORDER BY j.priority DESC, j.run_after, j.job_id
        LIMIT 1
    ) AS h
    WHERE t.tenant IS NOT NULL;

    IF queue_kinds IS NULL THEN
        RETURN;  -- nothing to claim now
    END IF;
    only_kind := queue_kinds[1];
    top_priority := head_priorities[1];
    IF EXISTS (SELECT 1 FROM unnest(queue_kinds, head_priorities) AS q(kind, priority)
               WHERE q.kind <> only_kind OR q.priority <> top_priority) THEN
        RETURN QUERY SELECT f.* FROM jobs_claim_fair(claim_worker, claim_kinds, claim_limit, claim_lease_seconds) AS f;
        RETURN;
    END IF;

    SELECT jk.limit_keys INTO declared
    FROM job_kinds AS jk
    WHERE jk.kind = only_kind AND jk.limit_keys <> '{}';
    kind_keys := ARRAY['kind:' || only_kind] || coalesce(declared, '{}');
    SELECT array_agg(l.key ORDER BY hashtext(l.key), l.key) FILTER (WHERE l.key = ANY (c.keys)),
           coalesce(bool_or(NOT l.key = ANY (c.keys)), false)
    INTO limited, other_limits
    FROM job_limits AS l
    CROSS JOIN (SELECT kind_keys || ARRAY(SELECT 'tenant:' || q.tenant FROM unnest(queue_tenants) AS q(tenant))
                    AS keys) AS c
    WHERE l.max_running > 0 OR l.rate_per_second > 0;
    IF limited IS NOT NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_claim counts running jobs with a snapshot per statement: READ COMMITTED only';
    END IF;

    live := queue_tenants;
    SELECT array_agg(coalesce(r.n, 0) ORDER BY u.ord), array_agg(coalesce(w.weight, 1) ORDER BY u.ord)
    INTO running, weights
    FROM unnest(live) WITH ORDINALITY AS u(tenant, ord)
    LEFT JOIN (SELECT j.tenant, count(*) AS n
               FROM jobs AS j
               WHERE cardinality(live) > 1 AND j.state = 'running' AND j.tenant = ANY (live)
               GROUP BY j.tenant) AS r ON r.tenant = u.tenant
    LEFT JOIN tenant_weights AS w ON w.tenant = u.tenant;
    all_running := running;
    all_weights := weights;

    LOOP
        rounds := rounds + 1;
        -- Each tenant's part of the rest of the batch: the smallest shares (running + n) / weight win.
        IF cardinality(live) = 1 THEN
            shares_of := live;
            share_counts := ARRAY[least(claim_limit - claimed, coalesce(room, claim_limit),
                                        coalesce((tenant_room ->> live[1])::integer, claim_limit))];
        ELSE
            SELECT array_agg(s.tenant), array_agg(s.n)
            INTO shares_of, share_counts
            FROM (SELECT c.tenant, count(*) AS n
                  FROM (SELECT q.tenant
                        FROM unnest(live, running, weights) AS q(tenant, running, weight)
                        JOIN unnest(queue_tenants, head_ages) AS h(tenant, age) ON h.tenant = q.tenant
                        CROSS JOIN generate_series(1, claim_limit - claimed) AS i(n)
                        WHERE i.n <= coalesce((tenant_room ->> q.tenant)::integer, claim_limit)
                        ORDER BY (q.running + i.n)::float8 / q.weight, h.age, q.tenant
                        LIMIT least(claim_limit - claimed, coalesce(room, claim_limit))) AS c
                  GROUP BY c.tenant) AS s;
        END IF;
        EXIT WHEN shares_of IS NULL;

        -- Each part locked as it is read, in the tenant's queue order, past the rows racing claimers hold.
        -- A job that bounds itself, or carries a key some other limit may bind, is the fair claim's to
        -- admit: at the first round (no key locked yet) the batch goes there; later ones pass it over.
        SELECT coalesce(array_agg(l.job_id ORDER BY a.ord, l.run_after, l.job_id), '{}'),
               coalesce(array_agg(l.tenant ORDER BY a.ord, l.run_after, l.job_id), '{}'),
               coalesce(bool_or(l.needs_admission), false)
        INTO locked_ids, locked_tenants, needs_admission
        FROM unnest(shares_of, share_counts) WITH ORDINALITY AS a(tenant, n, ord)
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.tenant, j.run_after,
                   jobs_claim_needs_admission(j.limit_keys, j.limit_key_bounds, other_limits) AS needs_admission
            FROM jobs AS j
            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = only_kind AND j.tenant = a.tenant
              AND j.priority = top_priority
              AND j.run_after <= clock_timestamp()
              AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
              AND (rounds = 1 OR NOT jobs_claim_needs_admission(j.limit_keys, j.limit_key_bounds, other_limits))
            ORDER BY j.priority DESC, j.run_after, j.job_id
            LIMIT a.n
            FOR UPDATE OF j SKIP LOCKED
        ) AS l;

        IF needs_admission THEN
            -- The rows locked here are this transaction's: the fair claim can take them.
            RETURN QUERY SELECT f.* FROM jobs_claim_fair(claim_worker, claim_kinds, claim_limit - claimed,
                                                         claim_lease_seconds) AS f;
            RETURN;
        END IF;

        IF limited IS NOT NULL AND NOT keys_locked THEN
            -- The limits' keys are locked in the order every claim takes them (jobs_claim_admit's), then the
            -- room under each is counted in this statement's snapshot, which holds what racing claimers
            -- started. A key with room to spare is locked shared: no more than `max_connections` claims run
            -- at once, so claims that each take at most their count of the room divided by that cannot
            -- together take more than the room, and they need not wait for each other. Which keys have it
            -- is judged first without the locks; a key near its bound is locked alone, as in the fair claim.
            holders := current_setting('max_connections')::integer;
            at := clock_timestamp();
            key_rooms := jobs_claim_room_floor(limited, at);
            FOR limit_row IN SELECT k.key FROM unnest(limited) AS k(key) LOOP
                IF (key_rooms ->> limit_row.key)::bigint >= holders::bigint * claim_limit THEN
                    shared_keys := shared_keys || limit_row.key;
                    PERFORM pg_advisory_xact_lock_shared(18, hashtext(limit_row.key));
                ELSE
                    PERFORM pg_advisory_xact_lock(18, hashtext(limit_row.key));
                END IF;
            END LOOP;
            keys_locked := true;
            at := clock_timestamp();
            key_rooms := jobs_claim_room(limited, at);
            FOR limit_row IN SELECT k.key FROM unnest(limited) AS k(key) LOOP
                key_room := (key_rooms ->> limit_row.key)::integer;
                IF limit_row.key = ANY (shared_keys) THEN
                    key_room := key_room / holders;
                END IF;
                IF limit_row.key = ANY (kind_keys) THEN
                    room := least(coalesce(room, key_room), key_room);  -- carried by every job of the batch
                ELSE
                    tenant_room := tenant_room || jsonb_build_object(substr(limit_row.key, 8), key_room);
                END IF;
            END LOOP;
        END IF;

        -- The locked rows that fit the room, by share, as the parts were made.
        SELECT coalesce(array_agg(c.job_id), '{}'), coalesce(array_agg(c.tenant), '{}')
        INTO chosen_ids, chosen_tenants
        FROM (SELECT l.job_id, l.tenant
              FROM (SELECT u.job_id, u.tenant, row_number() OVER (PARTITION BY u.tenant ORDER BY u.ord) AS n
                    FROM unnest(locked_ids, locked_tenants) WITH ORDINALITY AS u(job_id, tenant, ord)) AS l
              JOIN unnest(live, running, weights) AS q(tenant, running, weight) ON q.tenant = l.tenant
              JOIN unnest(queue_tenants, head_ages) AS h(tenant, age) ON h.tenant = l.tenant
              WHERE l.n <= coalesce((tenant_room ->> l.tenant)::integer, claim_limit)
              ORDER BY (q.running + l.n)::float8 / q.weight, h.age, l.tenant
              LIMIT least(claim_limit - claimed, coalesce(room, claim_limit))) AS c;

        IF cardinality(chosen_ids) > 0 THEN
            RETURN QUERY
            UPDATE jobs AS j
            SET state = 'running',
                -- A transition: raised here rather than by the row trigger (0023).
                sequence = j.sequence + 1,
                attempts = j.attempts + 1,
                fencing_token = j.fencing_token + 1,
                lease_owner = claim_worker,
                lease_expires_at = clock_timestamp() + make_interval(secs => claim_lease_seconds),
                started_at = clock_timestamp(),
                running_keys = jobs_effective_keys(j.tenant, j.kind, declared, j.limit_keys),
                transition_actor = 'worker:' || claim_worker,
                transition_reason = 'claimed'
            -- By key, as an array: a join with the locked rows was planned (generically) as a hash join over
            -- the whole primary key.
            WHERE j.job_id = ANY (chosen_ids)
            RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
                      j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at), j.started_at,
                      j.traceparent, j.tracestate;
            claimed := claimed + cardinality(chosen_ids);
            SELECT coalesce(jsonb_object_agg(c.tenant, c.n), '{}') INTO got
            FROM (SELECT u.tenant, count(*) AS n FROM unnest(chosen_tenants) AS u(tenant) GROUP BY u.tenant) AS c;
            claimed_by_tenant := (SELECT jsonb_object_agg(u.tenant, coalesce((claimed_by_tenant ->> u.tenant)::integer, 0)
                                                                    + coalesce((got ->> u.tenant)::integer, 0))
                                  FROM unnest(queue_tenants) AS u(tenant));
            room := room - cardinality(chosen_ids);
            tenant_room := (SELECT coalesce(jsonb_object_agg(e.key, e.value::integer - coalesce((got ->> e.key)::integer, 0)), '{}')
                            FROM jsonb_each_text(tenant_room) AS e);
        ELSE
            got := '{}';
        END IF;

        EXIT WHEN claimed >= claim_limit OR rounds >= 6 OR room = 0;
        -- A tenant that got less than its part has no more rows to claim now (or racing claimers hold
        -- them); the others (those given no part too) share what is left, their running counts raised by
        -- what they got.
        SELECT array_agg(q.tenant ORDER BY q.ord),
               array_agg(q.running + coalesce((got ->> q.tenant)::integer, 0) ORDER BY q.ord),
               array_agg(q.weight ORDER BY q.ord)
        INTO live, running, weights
        FROM unnest(live, running, weights) WITH ORDINALITY AS q(tenant, running, weight, ord)
        LEFT JOIN unnest(shares_of, share_counts) AS a(tenant, n) ON a.tenant = q.tenant
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM unnest(locked_tenants) AS t(tenant)
                            WHERE t.tenant = q.tenant) AS g
        -- ... and a tenant whose own limit is full takes no more.
        WHERE g.n >= coalesce(a.n, 0) AND coalesce((tenant_room ->> q.tenant)::integer, 1) > 0;
        IF live IS NULL THEN
            -- No tenant has more jobs at this priority: the next one down, if any, for every tenant again,
            -- with the running counts this claim raised (the same keys, so the same locks, bound them).
            SELECT max(n.priority) INTO top_priority
            FROM unnest(queue_tenants) AS q(tenant)
            CROSS JOIN LATERAL (
                SELECT j.priority
                FROM jobs AS j
                WHERE j.state IN ('pending', 'retry_wait') AND j.kind = only_kind AND j.tenant = q.tenant
                  AND j.priority < top_priority
                  AND j.run_after <= clock_timestamp()
                  AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                ORDER BY j.priority DESC, j.run_after, j.job_id
                LIMIT 1
            ) AS n;
            EXIT WHEN top_priority IS NULL;
            SELECT array_agg(u.tenant ORDER BY u.ord),
                   array_agg(u.running + coalesce((claimed_by_tenant ->> u.tenant)::integer, 0) ORDER BY u.ord),
                   array_agg(u.weight ORDER BY u.ord)
            INTO live, running, weights
            FROM unnest(queue_tenants, all_running, all_weights) WITH ORDINALITY AS u(tenant, running, weight, ord)
            WHERE coalesce((tenant_room ->> u.tenant)::integer, 1) > 0;
            EXIT WHEN live IS NULL;
        END IF;
    END LOOP;

    IF keys_locked AND claimed > 0 THEN
        -- Tokens taken from each rate-limited key, by the clock the room was computed with. A key locked
        -- shared is charged in a row of this backend's own, which no other claim writes: claims sharing a
        -- key's lock charged its one row one after another, each waiting for the last to commit. A key
        -- locked exclusively is charged in its bucket, and the charges made under shared locks are folded in.
        SELECT jsonb_object_agg(k.key, CASE WHEN k.key = ANY (kind_keys)
                                            THEN claimed
                                            ELSE coalesce((claimed_by_tenant ->> substr(k.key, 8))::integer, 0) END)
        INTO charged_of
        FROM unnest(limited) AS k(key);
        INSERT INTO job_key_charges AS c (key, holder, taken)
        SELECT l.key, pg_backend_pid(), (charged_of ->> l.key)::integer
        FROM job_limits AS l
        WHERE l.key = ANY (shared_keys) AND l.rate_per_second > 0 AND (charged_of ->> l.key)::integer > 0
        ON CONFLICT (key, holder) DO UPDATE SET taken = c.taken + EXCLUDED.taken;
        IF EXISTS (SELECT 1 FROM unnest(limited) AS k(key) WHERE NOT k.key = ANY (shared_keys)) THEN
            -- Tried only for a key with no state yet: an insert meeting a row another claim is charging
            -- would wait for that claim to commit.
            INSERT INTO job_key_state (key)
            SELECT l.key
            FROM job_limits AS l
            WHERE l.key = ANY (limited) AND NOT l.key = ANY (shared_keys) AND l.rate_per_second > 0
              AND NOT EXISTS (SELECT 1 FROM job_key_state AS s WHERE s.key = l.key)
            ON CONFLICT (key) DO NOTHING;
            WITH charged AS (
                UPDATE job_key_state AS s
                SET tokens = jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)
                             - (charged_of ->> l.key)::integer,
                    refilled_at = at
                FROM job_limits AS l
                WHERE s.key = l.key AND l.key = ANY (limited) AND NOT l.key = ANY (shared_keys)
                  AND l.rate_per_second > 0 AND (charged_of ->> l.key)::integer > 0
                RETURNING s.key
            )
            DELETE FROM job_key_charges AS c
            USING charged AS d
            WHERE c.key = d.key;
        END IF;
    END IF;
END
$$;

-- 0017's reason a job waits, its tokens read through jobs_key_tokens.
CREATE OR REPLACE FUNCTION jobs_waiting_reason(for_job uuid)
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

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_key_charges OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_key_tokens(text, double precision, integer, double precision, timestamptz, timestamptz)
            OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_claim_rooms_remember(jsonb, timestamptz) OWNER TO jobs_migrator;
    END IF;
END $$;
