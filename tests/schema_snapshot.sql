-- The migrated schema, normalised. Written by tests/integration/test_migrations.py; refresh it with
-- JOBS_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/integration/test_migrations.py -k snapshot

CREATE TYPE public.delivery_set_failure_policy AS ENUM (
    'fail_set',
    'wait_for_manual_retry'
);

CREATE TYPE public.error_category AS ENUM (
    'retryable',
    'permanent',
    'outcome_unknown'
);

CREATE TYPE public.failure_cause AS ENUM (
    'cancel_requested',
    'outcome_unknown',
    'permanent',
    'attempts_exhausted',
    'deadline',
    'retry'
);

CREATE TYPE public.job_executor AS ENUM (
    'async',
    'thread',
    'process'
);

CREATE TYPE public.job_state AS ENUM (
    'pending',
    'blocked',
    'running',
    'retry_wait',
    'succeeded',
    'failed',
    'cancelled',
    'superseded',
    'outcome_unknown'
);

CREATE TYPE public.jobs_claim_state AS (
	batch integer,
	claimed integer,
	rounds integer,
	done boolean,
	priority integer,
	pair_kinds text[],
	pair_tenants text[],
	pair_priorities integer[],
	declared jsonb,
	tenants text[],
	tenant_running bigint[],
	tenant_weights integer[],
	tenant_ages timestamp with time zone[],
	tenant_live boolean[],
	limited text[],
	keys_locked boolean,
	counted_at timestamp with time zone,
	parts jsonb,
	least_part integer,
	key_running jsonb,
	shared_keys text[],
	charge_shared boolean,
	rated_keys text[],
	shares_of text[],
	share_counts bigint[],
	locked_ids uuid[],
	locked_tenants text[],
	locked_kinds text[],
	locked_keyed boolean,
	chosen_ids uuid[],
	chosen_tenants text[],
	chosen_kinds text[],
	taken jsonb,
	park_ids uuid[],
	park_keys text[]
);

CREATE FUNCTION public.job_unconfirmed_step(p_job_id uuid, p_attempt integer) RETURNS text
    LANGUAGE sql
    AS $$ SELECT step FROM job_receipts
          WHERE job_id = p_job_id AND attempt = p_attempt AND confirmed_at IS NULL
          ORDER BY step
          LIMIT 1 $$;

CREATE FUNCTION public.jobs_bucket_tokens(rate double precision, burst integer, tokens double precision, refilled_at timestamp with time zone, at timestamp with time zone) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT CASE WHEN tokens IS NULL THEN burst::double precision
                    ELSE least(burst::double precision,
                               tokens + rate * greatest(0, extract(epoch FROM at - refilled_at)::double precision))
               END
    $$;

CREATE FUNCTION public.jobs_bump_sequence() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        NEW.sequence := OLD.sequence + 1;
    ELSE
        NEW.sequence := OLD.sequence;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION public.jobs_changed_batch_size() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 100 $$;

CREATE FUNCTION public.jobs_changes_watched() RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM job_change_watchers AS w WHERE w.expires_at > now());
END
$$;

CREATE FUNCTION public.jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer, claim_lease_seconds double precision) RETURNS TABLE(job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer, fencing_token bigint, lease_expires_at timestamp with time zone, created_at timestamp with time zone, queued_since timestamp with time zone, claimed_at timestamp with time zone, traceparent text, tracestate text)
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_sort TO 'off'
    SET enable_incremental_sort TO 'off'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    s jobs_claim_state;
    -- Read per row by the claim's UPDATE: a variable of its own is read faster than a field of `s`.
    declared jsonb;
BEGIN
    s := jobs_claim_start(claim_kinds, claim_limit);
    declared := s.declared;
    WHILE NOT s.done LOOP
        s := jobs_claim_round(s);
        IF cardinality(s.chosen_ids) > 0 THEN
            -- Each round's rows are stamped started as it claims them, not at the end of the claim.
            RETURN QUERY
            UPDATE jobs AS j
            SET state = 'running',
                -- A transition: raised here rather than by the row trigger.
                sequence = j.sequence + 1,
                attempts = j.attempts + 1,
                fencing_token = j.fencing_token + 1,
                lease_owner = claim_worker,
                lease_expires_at = clock_timestamp() + make_interval(secs => claim_lease_seconds),
                started_at = clock_timestamp(),
                running_keys = jobs_effective_keys(j.tenant, j.kind, CASE WHEN declared ? j.kind
                                                                   THEN jobs_declared_keys(declared, j.kind) END,
                                                   j.limit_keys),
                transition_actor = 'worker:' || claim_worker,
                transition_reason = 'claimed'
            -- By key, as an array: a join with the chosen rows was planned (generically) as a hash join over
            -- the whole primary key.
            WHERE j.job_id = ANY (s.chosen_ids)
            RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
                      j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at), j.started_at,
                      j.traceparent, j.tracestate;
        END IF;
    END LOOP;
    IF s.keys_locked OR cardinality(s.park_ids) > 0 THEN
        PERFORM jobs_claim_finish(s);
    END IF;
END
$$;

CREATE FUNCTION public.jobs_claim_add(counts jsonb, took jsonb, sign integer) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF took = '{}' THEN
        RETURN counts;
    ELSIF counts = '{}' AND sign > 0 THEN
        RETURN took;
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(k.key, coalesce((counts ->> k.key)::integer, 0)
                                                    + sign * coalesce((took ->> k.key)::integer, 0)), '{}')
            FROM (SELECT jsonb_object_keys(counts) UNION SELECT jsonb_object_keys(took) WHERE sign > 0) AS k(key));
END
$$;

CREATE FUNCTION public.jobs_claim_at_priority(priorities integer[], top integer) RETURNS boolean[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY(SELECT p.priority = top FROM unnest(priorities) AS p(priority)) $$;

CREATE FUNCTION public.jobs_claim_choose(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
BEGIN
    SELECT coalesce(array_agg(f.job_id) FILTER (WHERE f.park_on IS NULL), '{}'),
           coalesce(array_agg(f.tenant) FILTER (WHERE f.park_on IS NULL), '{}'),
           coalesce(array_agg(f.kind) FILTER (WHERE f.park_on IS NULL), '{}'),
           s.park_ids || coalesce(array_agg(f.job_id) FILTER (WHERE f.park_on IS NOT NULL), '{}'),
           s.park_keys || coalesce(array_agg(f.park_on) FILTER (WHERE f.park_on IS NOT NULL), '{}')
    INTO s.chosen_ids, s.chosen_tenants, s.chosen_kinds, s.park_ids, s.park_keys
    FROM jobs_claim_fit(s) AS f;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_finish(s public.jobs_claim_state) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- The last round's takings under the rate-limited keys; every claimed job holds its kind's key.
    s.taken := CASE WHEN cardinality(s.rated_keys) = 0 OR cardinality(s.chosen_ids) = 0 THEN s.taken
                    WHEN s.taken = '{}' AND s.rated_keys = ARRAY[jobs_kind_key(s.chosen_kinds[1])]
                         AND s.chosen_kinds[1] = ALL (s.chosen_kinds) AND s.declared = '{}'
                    THEN jsonb_build_object(s.rated_keys[1], cardinality(s.chosen_ids))
                    ELSE jobs_claim_add(s.taken, jobs_claim_took(s, s.rated_keys), 1) END;
    IF s.claimed > 0 AND s.charge_shared THEN
        INSERT INTO job_key_charges AS c (key, holder, taken)
        SELECT l.key, pg_backend_pid(), (s.taken ->> l.key)::integer
        FROM job_limits AS l
        WHERE l.key = ANY (s.shared_keys) AND l.rate_per_second > 0 AND (s.taken ->> l.key)::integer > 0
        ON CONFLICT (key, holder) DO UPDATE SET taken = c.taken + EXCLUDED.taken;
    END IF;
    IF s.claimed > 0 AND cardinality(s.shared_keys) < cardinality(s.limited) THEN
        -- Tried only for a key with no state yet: an insert meeting a row another claim is charging would
        -- wait for that claim to commit.
        INSERT INTO job_key_state (key)
        SELECT l.key
        FROM job_limits AS l
        WHERE l.key = ANY (s.limited) AND NOT l.key = ANY (s.shared_keys) AND l.rate_per_second > 0
          AND (s.taken ->> l.key)::integer > 0
          AND NOT EXISTS (SELECT 1 FROM job_key_state AS ks WHERE ks.key = l.key)
        ON CONFLICT (key) DO NOTHING;
        WITH charged AS (
            UPDATE job_key_state AS ks
            SET tokens = jobs_key_tokens(l.key, l.rate_per_second, l.burst, ks.tokens, ks.refilled_at, s.counted_at)
                         - (s.taken ->> l.key)::integer,
                refilled_at = s.counted_at
            FROM job_limits AS l
            WHERE ks.key = l.key AND l.key = ANY (s.limited) AND NOT l.key = ANY (s.shared_keys)
              AND l.rate_per_second > 0 AND (s.taken ->> l.key)::integer > 0
            RETURNING ks.key
        )
        DELETE FROM job_key_charges AS c
        USING charged AS d
        WHERE c.key = d.key;
    END IF;
    IF cardinality(s.park_ids) > 0 THEN
        UPDATE jobs AS j
        SET parked_on = s.park_keys[array_position(s.park_ids, j.job_id)]
        WHERE j.job_id = ANY (s.park_ids);
    END IF;
END
$$;

CREATE FUNCTION public.jobs_claim_fit(s public.jobs_claim_state) RETURNS TABLE(job_id uuid, tenant text, kind text, park_on text)
    LANGUAGE sql STABLE
    AS $$
        WITH ranked AS (
            SELECT c.job_id, c.tenant, c.kind, row_number() OVER (ORDER BY c.share, c.age, c.tenant, c.ord) AS pos
            FROM (SELECT u.job_id, u.tenant, u.kind, u.ord, t.age,
                         (t.running + row_number() OVER (PARTITION BY u.tenant ORDER BY u.ord))::float8 / t.weight
                             AS share
                  FROM unnest(s.locked_ids, s.locked_tenants, s.locked_kinds) WITH ORDINALITY AS u(job_id, tenant, kind, ord)
                  JOIN unnest(s.tenants, s.tenant_running, s.tenant_weights, s.tenant_ages) AS t(tenant, running, weight, age)
                    ON t.tenant = u.tenant) AS c
        ), own AS (
            SELECT r.job_id, o.key, o.bound, count(*) OVER (PARTITION BY o.key ORDER BY r.pos) - 1 AS before
            FROM ranked AS r
            JOIN jobs AS j ON s.locked_keyed AND j.job_id = r.job_id
            CROSS JOIN LATERAL unnest(j.limit_keys, j.limit_key_bounds) AS o(key, bound)
            WHERE o.key = ANY (s.limited)
        ), short AS (
            SELECT w.job_id, min(w.key) FILTER (WHERE NOT w.key = ANY (s.shared_keys)) AS key
            FROM own AS w
            WHERE w.before >= (s.parts ->> w.key)::bigint
               OR (w.bound > 0 AND coalesce((s.key_running ->> w.key)::bigint, 0)
                                   + coalesce((s.taken ->> w.key)::bigint, 0) + w.before >= w.bound)
            GROUP BY w.job_id
        ), by_tenant AS (
            SELECT r.job_id, r.tenant, r.kind, r.pos, row_number() OVER (PARTITION BY r.tenant ORDER BY r.pos) AS n
            FROM ranked AS r
            WHERE NOT EXISTS (SELECT 1 FROM short AS x WHERE x.job_id = r.job_id)
        ), by_kind AS (
            SELECT b.job_id, b.tenant, b.kind, b.pos, row_number() OVER (PARTITION BY b.kind ORDER BY b.pos) AS n
            FROM by_tenant AS b
            WHERE coalesce(b.n <= (s.parts ->> jobs_tenant_key(b.tenant))::bigint, true)
        ), by_declared AS (
            SELECT k.job_id, k.tenant, k.kind, k.pos
            FROM by_kind AS k
            WHERE coalesce(k.n <= (s.parts ->> jobs_kind_key(k.kind))::bigint, true)
        ), declared_short AS (
            SELECT d.job_id
            FROM (SELECT f.job_id, x.key, count(*) OVER (PARTITION BY x.key ORDER BY f.pos) AS n
                  FROM by_declared AS f
                  CROSS JOIN LATERAL jsonb_array_elements_text(s.declared -> f.kind) AS x(key)
                  WHERE x.key = ANY (s.limited)) AS d
            WHERE d.n > (s.parts ->> d.key)::bigint
        )
        (SELECT f.job_id, f.tenant, f.kind, NULL::text
         FROM by_declared AS f
         WHERE NOT EXISTS (SELECT 1 FROM declared_short AS d WHERE d.job_id = f.job_id)
         ORDER BY f.pos
         LIMIT s.batch - s.claimed)
        UNION ALL
        SELECT x.job_id, r.tenant, r.kind, x.key
        FROM short AS x
        JOIN ranked AS r ON r.job_id = x.job_id
        WHERE x.key IS NOT NULL
    $$;

CREATE FUNCTION public.jobs_claim_heads(claim_kinds text[]) RETURNS TABLE(kind text, tenant text, priority integer, run_after timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
        WITH RECURSIVE open_kinds AS (
            SELECT k.kind
            FROM unnest(claim_kinds) AS k(kind)
            WHERE NOT EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = k.kind)
        ), tenants AS (
            -- Each tenant's first row in the runnable index's order: its next job, unless that one waits for
            -- a later time or has passed its deadline.
            SELECT o.kind, f.tenant, f.priority, f.run_after, f.runnable
            FROM open_kinds AS o
            CROSS JOIN LATERAL (
                SELECT j.tenant, j.priority, j.run_after,
                       j.run_after <= clock_timestamp() AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                           AS runnable
                FROM jobs AS j
                WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = o.kind
                ORDER BY j.tenant, j.priority DESC, j.run_after, j.job_id
                LIMIT 1
            ) AS f
            UNION ALL
            SELECT t.kind, f.tenant, f.priority, f.run_after, f.runnable
            FROM tenants AS t
            CROSS JOIN LATERAL (
                SELECT j.tenant, j.priority, j.run_after,
                       j.run_after <= clock_timestamp() AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                           AS runnable
                FROM jobs AS j
                WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = t.kind
                  AND j.tenant > t.tenant
                ORDER BY j.tenant, j.priority DESC, j.run_after, j.job_id
                LIMIT 1
            ) AS f
        )
        SELECT t.kind, t.tenant, h.priority, h.run_after
        FROM tenants AS t
        CROSS JOIN LATERAL (
            SELECT t.priority, t.run_after
            WHERE t.runnable
            UNION ALL
            -- Looked up only behind a first row that cannot run now (a one-time filter).
            (SELECT j.priority, j.run_after
             FROM jobs AS j
             WHERE NOT t.runnable
               AND j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = t.kind
               AND j.tenant = t.tenant AND j.run_after <= clock_timestamp()
               AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
             ORDER BY j.priority DESC, j.run_after, j.job_id
             LIMIT 1)
        ) AS h
    $$;

CREATE FUNCTION public.jobs_claim_kinds_not_held(claim_kinds text[]) RETURNS text[]
    LANGUAGE sql STABLE
    AS $$
        SELECT ARRAY(SELECT k.kind
                     FROM unnest(claim_kinds) AS k(kind)
                     WHERE NOT EXISTS (SELECT 1
                                       FROM job_key_state AS s
                                       WHERE s.held_until > clock_timestamp()
                                         AND (s.key = jobs_kind_key(k.kind)
                                              OR s.key = ANY (SELECT unnest(jk.limit_keys) FROM job_kinds AS jk
                                                              WHERE jk.kind = k.kind))))
    $$;

CREATE FUNCTION public.jobs_claim_lock_parts(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    -- Read per row by the row locks: variables of their own are read faster than fields of `s`.
    queue_kind text := s.pair_kinds[1];
    passing text[] := CASE WHEN s.keys_locked THEN coalesce(s.limited, '{}') END;
BEGIN
    SELECT coalesce(array_agg(l.job_id), '{}'), coalesce(array_agg(l.tenant), '{}'),
           coalesce(array_agg(l.kind), '{}'), coalesce(bool_or(l.keyed), false)
    INTO s.locked_ids, s.locked_tenants, s.locked_kinds, s.locked_keyed
    FROM (SELECT l.job_id, l.tenant, l.kind, l.keyed
          FROM unnest(s.shares_of, s.share_counts) WITH ORDINALITY AS a(tenant, n, ord)
          CROSS JOIN LATERAL (
              SELECT j.job_id, j.tenant, j.kind, j.run_after, j.limit_keys <> '{}' AS keyed
              FROM jobs AS j
              WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = queue_kind
                AND j.tenant = a.tenant AND j.priority = s.priority AND j.run_after <= clock_timestamp()
                AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                AND (passing IS NULL OR j.limit_keys <@ passing)
              ORDER BY j.priority DESC, j.run_after, j.job_id
              LIMIT a.n
              FOR UPDATE OF j SKIP LOCKED
          ) AS l
          ORDER BY a.ord, l.run_after, l.job_id) AS l;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_lock_rows(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
BEGIN
    SELECT coalesce(array_agg(l.job_id ORDER BY a.ord, l.run_after, l.job_id), '{}'),
           coalesce(array_agg(l.tenant ORDER BY a.ord, l.run_after, l.job_id), '{}'),
           coalesce(array_agg(l.kind ORDER BY a.ord, l.run_after, l.job_id), '{}'),
           coalesce(bool_or(l.keyed), false)
    INTO s.locked_ids, s.locked_tenants, s.locked_kinds, s.locked_keyed
    FROM unnest(s.shares_of, s.share_counts) WITH ORDINALITY AS a(tenant, n, ord)
    JOIN unnest(s.pair_kinds, s.pair_tenants, s.pair_priorities) AS q(kind, tenant, priority)
      ON q.tenant = a.tenant AND q.priority >= s.priority
    CROSS JOIN LATERAL (
        SELECT j.job_id, j.tenant, j.kind, j.run_after, j.limit_keys <> '{}' AS keyed
        FROM jobs AS j
        WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = q.kind
          AND j.tenant = a.tenant AND j.priority = s.priority
          AND j.run_after <= clock_timestamp()
          AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
          AND (NOT s.keys_locked OR j.limit_keys <@ coalesce(s.limited, '{}'))
        ORDER BY j.priority DESC, j.run_after, j.job_id
        LIMIT a.n
        FOR UPDATE OF j SKIP LOCKED
    ) AS l;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_next(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    took jsonb := jobs_claim_took(s, s.limited);
BEGIN
    s.taken := jobs_claim_add(s.taken, took, 1);
    s.parts := jobs_claim_add(s.parts, took, -1);
    s.least_part := (SELECT min(e.value::integer) FROM jsonb_each_text(s.parts) AS e);
    SELECT array_agg(q.running + g.got ORDER BY q.ord),
           array_agg(q.live AND g.got >= coalesce(a.n, 0)
                     AND coalesce((s.parts ->> jobs_tenant_key(q.tenant))::integer, 1) > 0 ORDER BY q.ord)
    INTO s.tenant_running, s.tenant_live
    FROM unnest(s.tenants, s.tenant_running, s.tenant_live) WITH ORDINALITY AS q(tenant, running, live, ord)
    LEFT JOIN unnest(s.shares_of, s.share_counts) AS a(tenant, n) ON a.tenant = q.tenant
    CROSS JOIN LATERAL (SELECT count(*) AS got FROM unnest(s.chosen_tenants) AS t(tenant) WHERE t.tenant = q.tenant) AS g;
    IF NOT (true = ANY (s.tenant_live)) THEN
        SELECT max(n.priority)
        INTO s.priority
        FROM unnest(s.pair_kinds, s.pair_tenants) AS q(kind, tenant)
        CROSS JOIN LATERAL (
            SELECT j.priority
            FROM jobs AS j
            WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = q.kind
              AND j.tenant = q.tenant AND j.priority < s.priority
              AND j.run_after <= clock_timestamp()
              AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
            ORDER BY j.priority DESC, j.run_after, j.job_id
            LIMIT 1
        ) AS n;
        s.done := s.priority IS NULL;
        s.tenant_live := ARRAY(SELECT coalesce((s.parts ->> jobs_tenant_key(t.tenant))::integer, 1) > 0
                               FROM unnest(s.tenants) WITH ORDINALITY AS t(tenant, ord)
                               ORDER BY t.ord);
    END IF;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_parts(tenants text[], running bigint[], weights integer[], ages timestamp with time zone[], live boolean[], parts jsonb, cap integer) RETURNS TABLE(tenant text, n bigint)
    LANGUAGE sql STABLE
    AS $$
        SELECT c.tenant, count(*)
        FROM (SELECT q.tenant
              FROM unnest(tenants, running, weights, ages, live) AS q(tenant, running, weight, age, live)
              CROSS JOIN (SELECT (cap + sum(v.running) + count(*))::float8 / sum(v.weight) AS level,
                                 bool_or(parts ? jobs_tenant_key(v.tenant)) AS capped
                          FROM unnest(tenants, running, weights, live) AS v(tenant, running, weight, live)
                          WHERE v.live) AS lv
              CROSS JOIN LATERAL generate_series(1, least(
                  cap,
                  coalesce((parts ->> jobs_tenant_key(q.tenant))::integer, cap),
                  CASE WHEN NOT lv.capped
                       THEN greatest(0, floor(lv.level * q.weight - q.running)::bigint + 1) END)) AS i(n)
              WHERE q.live
              ORDER BY (q.running + i.n)::float8 / q.weight, q.age, q.tenant
              LIMIT cap) AS c
        GROUP BY c.tenant
    $$;

CREATE FUNCTION public.jobs_claim_requeue(claim_kinds text[], claim_limit integer, holds boolean, parked boolean) RETURNS TABLE(kinds text[], tenants text[], priorities integer[], ages timestamp with time zone[], priority integer)
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF parked THEN
        PERFORM jobs_claim_unpark(claim_limit);
    END IF;
    RETURN QUERY
    SELECT array_agg(h.kind ORDER BY h.kind, h.tenant), array_agg(h.tenant ORDER BY h.kind, h.tenant),
           array_agg(h.priority ORDER BY h.kind, h.tenant), array_agg(h.run_after ORDER BY h.kind, h.tenant),
           max(h.priority)
    FROM jobs_claim_heads(CASE WHEN holds THEN jobs_claim_kinds_not_held(claim_kinds) ELSE claim_kinds END) AS h
    WHERE NOT holds
       OR NOT EXISTS (SELECT 1 FROM job_key_state AS k
                      WHERE k.key = jobs_tenant_key(h.tenant) AND k.held_until > clock_timestamp());
END
$$;

CREATE FUNCTION public.jobs_claim_rooms(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    holders integer := current_setting('max_connections')::integer;
    judged jsonb;
    remembered jsonb := nullif(current_setting('jobs.claim_rooms', true), '')::jsonb;
    unused text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_claim counts running jobs with a snapshot per statement: READ COMMITTED only';
    END IF;
    IF s.locked_keyed THEN
        s.limited := jobs_claim_with_own_keys(s.limited, s.locked_ids);
    END IF;
    s.keys_locked := true;
    IF s.limited IS NULL THEN
        RETURN s;
    END IF;
    s.counted_at := clock_timestamp();
    IF remembered IS NOT NULL
       AND extract(epoch FROM s.counted_at) - (remembered ->> 'at')::double precision BETWEEN 0 AND 1
       AND (remembered -> 'rooms') ?& s.limited THEN
        judged := remembered -> 'rooms';
    ELSE
        judged := jobs_claim_rooms_at(s.limited, s.counted_at);
    END IF;
    -- In one statement, in the order of `limited`: the aggregate reads the array's rows in order and takes
    -- each row's lock as it reads it.
    SELECT coalesce(array_agg(k.key ORDER BY k.ord) FILTER (WHERE k.shared), '{}'),
           count(CASE WHEN k.shared THEN pg_advisory_xact_lock_shared(18, hashtext(k.key))
                      ELSE pg_advisory_xact_lock(18, hashtext(k.key)) END)::text
    INTO s.shared_keys, unused
    FROM (SELECT u.key, u.ord, coalesce((judged ->> u.key)::bigint >= holders::bigint * s.batch, false) AS shared
          FROM unnest(s.limited) WITH ORDINALITY AS u(key, ord)) AS k;
    -- The rooms counted in one statement, which keeps them for the session's next judgment too (less this
    -- claim's part of a key held shared, so that a key crossing the bound is judged short). OFFSET 0
    -- computes a key's room once: each reference to it would otherwise repeat its subqueries.
    s.counted_at := clock_timestamp();
    SELECT coalesce(jsonb_object_agg(r.key, r.part) FILTER (WHERE r.part IS NOT NULL), '{}'), min(r.part),
           coalesce(jsonb_object_agg(r.key, r.running) FILTER (WHERE r.running IS NOT NULL AND s.locked_keyed), '{}'),
           coalesce(bool_or(r.rated AND r.key = ANY (s.shared_keys)), false),
           coalesce(array_agg(r.key) FILTER (WHERE r.rated), '{}'),
           set_config('jobs.claim_rooms',
                      jsonb_build_object('at', extract(epoch FROM s.counted_at),
                                         'rooms', jsonb_object_agg(r.key, r.room - r.room / holders))::text,
                      false)
    INTO s.parts, s.least_part, s.key_running, s.charge_shared, s.rated_keys, unused
    FROM (SELECT k.key, l.rate_per_second > 0 AS rated, rm.room, rm.running,
                 CASE WHEN k.key = ANY (s.shared_keys) THEN rm.room / holders ELSE rm.room END AS part
          FROM unnest(s.limited) AS k(key)
          LEFT JOIN job_limits AS l ON l.key = k.key AND (l.max_running > 0 OR l.rate_per_second > 0)
          LEFT JOIN job_key_state AS ks ON ks.key = k.key
          CROSS JOIN LATERAL (
              SELECT CASE WHEN ks.held_until > s.counted_at THEN 0
                          WHEN l.key IS NULL THEN NULL  -- bound by the jobs' own bounds only
                          ELSE greatest(0, least(
                              CASE WHEN l.max_running > 0 THEN l.max_running - c.running END,
                              CASE WHEN l.rate_per_second > 0
                                   THEN floor(jobs_bucket_tokens(l.rate_per_second, l.burst, ks.tokens, ks.refilled_at,
                                                                 s.counted_at)
                                              - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c
                                                          WHERE c.key = k.key), 0)) END)) END::bigint
                         AS room,
                     c.running
              FROM (SELECT CASE WHEN l.rate_per_second > 0 AND NOT l.max_running > 0 THEN NULL
                                ELSE coalesce((SELECT sum(t.running) FROM job_running_tallies AS t
                                               WHERE t.key = k.key), 0) END AS running) AS c
              OFFSET 0
          ) AS rm) AS r;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_rooms_at(keys text[], at timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'public', 'pg_temp'
    AS $$
DECLARE
    rooms jsonb;
    running jsonb := '{}';
BEGIN
    IF EXISTS (SELECT 1 FROM job_limits AS l WHERE l.key = ANY (keys) AND l.max_running > 0) THEN
        running := jobs_running_under(keys);
    END IF;
    SELECT coalesce(jsonb_object_agg(l.key, greatest(0, least(
               CASE WHEN l.max_running > 0 THEN l.max_running - coalesce((running ->> l.key)::bigint, 0) END,
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

CREATE FUNCTION public.jobs_claim_round(s public.jobs_claim_state) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    -- How many of the batch this round may take: its rest, and while every queue is of one kind, the room
    -- under that kind's limits.
    cap integer := s.batch - s.claimed;
    -- Read per row by the row locks: variables of their own are read faster than fields of `s`.
    queue_kind text := s.pair_kinds[1];
    queue_tenant text;
    passing text[];
BEGIN
    IF s.rounds > 0 THEN
        s := jobs_claim_next(s);
        IF s.done THEN
            s.chosen_ids := '{}';
            RETURN s;
        END IF;
    END IF;
    s.rounds := s.rounds + 1;
    IF s.keys_locked AND s.pair_kinds[1] = ALL (s.pair_kinds) THEN
        cap := least(cap, (SELECT min(e.value::integer) FROM jsonb_each_text(s.parts) AS e
                           WHERE jobs_key_tenant(e.key) IS NULL));
    END IF;
    IF cardinality(array_remove(s.tenant_live, false)) = 1 THEN
        s.shares_of := ARRAY[s.tenants[array_position(s.tenant_live, true)]];
        s.share_counts := ARRAY[least(cap, coalesce((s.parts ->> jobs_tenant_key(s.shares_of[1]))::integer, cap))];
    ELSE
        SELECT array_agg(p.tenant), array_agg(p.n)
        INTO s.shares_of, s.share_counts
        FROM jobs_claim_parts(s.tenants, s.tenant_running, s.tenant_weights, s.tenant_ages, s.tenant_live, s.parts, cap) AS p;
    END IF;
    s.chosen_ids := '{}';
    IF s.shares_of IS NULL OR cap <= 0 THEN
        s.done := true;
        RETURN s;
    END IF;
    IF s.pair_kinds[1] = ALL (s.pair_kinds) AND cardinality(s.shares_of) = 1 THEN
        -- One part: locked as it is read, in the tenant's queue order, past the rows racing claimers hold.
        -- The aggregates take the rows in the order the locking scan gives them: an ORDER BY in each
        -- would sort the batch once per array (40 us a claim of 100).
        queue_tenant := s.shares_of[1];
        passing := CASE WHEN s.keys_locked THEN coalesce(s.limited, '{}') END;
        SELECT coalesce(array_agg(l.job_id), '{}'), coalesce(array_agg(l.tenant), '{}'),
               coalesce(array_agg(l.kind), '{}'), coalesce(bool_or(l.keyed), false)
        INTO s.locked_ids, s.locked_tenants, s.locked_kinds, s.locked_keyed
        FROM (SELECT j.job_id, j.tenant, j.kind, j.limit_keys <> '{}' AS keyed
              FROM jobs AS j
              WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on IS NULL AND j.kind = queue_kind
                AND j.tenant = queue_tenant AND j.priority = s.priority AND j.run_after <= clock_timestamp()
                AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                AND (passing IS NULL OR j.limit_keys <@ passing)
              ORDER BY j.priority DESC, j.run_after, j.job_id
              LIMIT s.share_counts[1]
              FOR UPDATE OF j SKIP LOCKED) AS l;
    ELSIF s.pair_kinds[1] = ALL (s.pair_kinds) THEN
        s := jobs_claim_lock_parts(s);
    ELSE
        s := jobs_claim_lock_rows(s);
    END IF;
    IF NOT s.keys_locked AND (s.limited IS NOT NULL OR s.locked_keyed) THEN
        s := jobs_claim_rooms(s);
    END IF;
    -- All the locked rows fit when no key of their own can turn one away, they are of one kind (the parts
    -- never add up to more than the rest), and every part of a room left holds them all.
    IF NOT s.locked_keyed AND s.pair_kinds[1] = ALL (s.pair_kinds)
       AND coalesce(s.least_part >= cardinality(s.locked_ids), true) THEN
        s.chosen_ids := s.locked_ids;
        s.chosen_tenants := s.locked_tenants;
        s.chosen_kinds := s.locked_kinds;
    ELSE
        s := jobs_claim_choose(s);
    END IF;
    s.claimed := s.claimed + cardinality(s.chosen_ids);
    s.done := s.claimed >= s.batch OR s.rounds >= 6;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_start(claim_kinds text[], claim_limit integer) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    s jobs_claim_state;
    pair_ages timestamptz[];
    holds boolean;
    parked boolean;
    declared text[];
BEGIN
    s := ROW(claim_limit, 0, 0, false, NULL, NULL, NULL, NULL, '{}', NULL, NULL, NULL, NULL, NULL, NULL, false,
             NULL, '{}', NULL, '{}', '{}', false, '{}', NULL, NULL, NULL, NULL, NULL, false, '{}', '{}', '{}', '{}', '{}',
             '{}');
    -- Whether any key is held by a pushback or any job parked (an index probe each), then the queues, read
    -- once: after the parked jobs with room are back, without what a hold keeps back. Read before the probes,
    -- the queues would be read twice by every claim while anything is parked or held.
    SELECT EXISTS (SELECT 1 FROM job_key_state AS k WHERE k.held_until > clock_timestamp()),
           EXISTS (SELECT 1 FROM jobs AS j WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on > '')
    INTO holds, parked;
    IF parked OR holds THEN
        SELECT r.* INTO s.pair_kinds, s.pair_tenants, s.pair_priorities, pair_ages, s.priority
        FROM jobs_claim_requeue(claim_kinds, claim_limit, holds, parked) AS r;
    ELSE
        SELECT array_agg(h.kind ORDER BY h.kind, h.tenant), array_agg(h.tenant ORDER BY h.kind, h.tenant),
               array_agg(h.priority ORDER BY h.kind, h.tenant), array_agg(h.run_after ORDER BY h.kind, h.tenant),
               max(h.priority)
        INTO s.pair_kinds, s.pair_tenants, s.pair_priorities, pair_ages, s.priority
        FROM jobs_claim_heads(claim_kinds) AS h;
    END IF;
    IF s.pair_kinds IS NULL THEN
        s.done := true;  -- nothing to claim now
        RETURN s;
    ELSIF NOT s.pair_kinds[1] = ALL (s.pair_kinds) THEN
        RETURN jobs_claim_start_kinds(s, pair_ages);
    END IF;
    -- One kind: a queue per tenant, each with its next job's age. The first round is the top priority's, among
    -- the tenants that have jobs of it. A tenant's running jobs, by key from its tallies (a probe each), weigh on
    -- its share (alone, on nothing), as does its weight.
    s.tenants := s.pair_tenants;
    s.tenant_ages := pair_ages;
    s.tenant_live := CASE WHEN s.priority = ALL (s.pair_priorities) THEN array_fill(true, ARRAY[cardinality(s.tenants)])
                          ELSE jobs_claim_at_priority(s.pair_priorities, s.priority) END;
    IF cardinality(s.tenants) = 1 THEN
        s.tenant_running := ARRAY[0]::bigint[];
        s.tenant_weights := ARRAY[1];
    ELSE
        SELECT array_agg(coalesce((SELECT sum(r.running) FROM job_running_tallies AS r
                                   WHERE r.key = jobs_tenant_key(u.tenant)), 0)::bigint ORDER BY u.ord),
               array_agg(coalesce((SELECT w.weight FROM tenant_weights AS w WHERE w.tenant = u.tenant), 1) ORDER BY u.ord)
        INTO s.tenant_running, s.tenant_weights
        FROM unnest(s.tenants) WITH ORDINALITY AS u(tenant, ord);
    END IF;
    -- The keys the kind declares; the limits in force on those, the kind's and the tenants' keys.
    SELECT d.keys,
           (SELECT array_agg(l.key ORDER BY hashtext(l.key), l.key)
            FROM job_limits AS l
            WHERE (l.max_running > 0 OR l.rate_per_second > 0)
              AND l.key = ANY (jobs_kind_key(s.pair_kinds[1]) || coalesce(d.keys, '{}')
                               || ARRAY(SELECT jobs_tenant_key(t.tenant) FROM unnest(s.tenants) AS t(tenant))))
    INTO declared, s.limited
    FROM (SELECT (SELECT jk.limit_keys FROM job_kinds AS jk
                  WHERE jk.kind = s.pair_kinds[1] AND jk.limit_keys <> '{}') AS keys) AS d;
    s.declared := CASE WHEN declared IS NULL THEN '{}' ELSE jsonb_build_object(s.pair_kinds[1], declared) END;
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_start_kinds(s public.jobs_claim_state, pair_ages timestamp with time zone[]) RETURNS public.jobs_claim_state
    LANGUAGE plpgsql
    AS $$
DECLARE
    keys text[];
BEGIN
    SELECT array_agg(t.tenant ORDER BY t.tenant), array_agg(t.age ORDER BY t.tenant),
           array_agg(t.priority = s.priority ORDER BY t.tenant),
           array_agg(coalesce((SELECT sum(r.running) FROM job_running_tallies AS r
                               WHERE r.key = jobs_tenant_key(t.tenant)), 0)::bigint ORDER BY t.tenant),
           array_agg(coalesce((SELECT w.weight FROM tenant_weights AS w WHERE w.tenant = t.tenant), 1) ORDER BY t.tenant)
    INTO s.tenants, s.tenant_ages, s.tenant_live, s.tenant_running, s.tenant_weights
    FROM (SELECT p.tenant, max(p.priority) AS priority, (array_agg(p.age ORDER BY p.priority DESC, p.age))[1] AS age
          FROM unnest(s.pair_tenants, s.pair_priorities, pair_ages) AS p(tenant, priority, age)
          GROUP BY p.tenant) AS t;
    SELECT coalesce(jsonb_object_agg(jk.kind, to_jsonb(jk.limit_keys)), '{}'),
           coalesce((SELECT array_agg(DISTINCT d.key) FROM job_kinds AS k, unnest(k.limit_keys) AS d(key)
                     WHERE k.kind = ANY (s.pair_kinds)), '{}')
    INTO s.declared, keys
    FROM job_kinds AS jk
    WHERE jk.kind = ANY (s.pair_kinds) AND jk.limit_keys <> '{}';
    SELECT array_agg(l.key ORDER BY hashtext(l.key), l.key)
    INTO s.limited
    FROM job_limits AS l
    WHERE (l.max_running > 0 OR l.rate_per_second > 0)
      AND l.key = ANY (keys || ARRAY(SELECT DISTINCT jobs_kind_key(k.kind) FROM unnest(s.pair_kinds) AS k(kind))
                       || ARRAY(SELECT jobs_tenant_key(t.tenant) FROM unnest(s.tenants) AS t(tenant)));
    RETURN s;
END
$$;

CREATE FUNCTION public.jobs_claim_took(s public.jobs_claim_state, counted text[]) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    took jsonb;
BEGIN
    IF cardinality(counted) = 0 OR cardinality(s.chosen_ids) = 0 THEN
        RETURN '{}';
    END IF;
    IF counted = ARRAY[jobs_kind_key(s.chosen_kinds[1])] AND s.chosen_kinds[1] = ALL (s.chosen_kinds)
       AND s.declared = '{}' THEN
        RETURN jsonb_build_object(counted[1], cardinality(s.chosen_ids));
    END IF;
    SELECT coalesce(jsonb_object_agg(x.key, x.n), '{}')
    INTO took
    FROM (SELECT k.key, count(*) AS n
          FROM (SELECT jobs_kind_key(c.kind) AS key FROM unnest(s.chosen_kinds) AS c(kind)
                UNION ALL
                SELECT jobs_tenant_key(c.tenant) FROM unnest(s.chosen_tenants) AS c(tenant)
                UNION ALL
                SELECT d.key
                FROM unnest(s.chosen_kinds) AS c(kind), jsonb_array_elements_text(s.declared -> c.kind) AS d(key)
                UNION ALL
                SELECT o.key
                FROM jobs AS j, unnest(j.limit_keys) AS o(key)
                WHERE s.locked_keyed AND j.job_id = ANY (s.chosen_ids)) AS k
          WHERE k.key = ANY (counted)
          GROUP BY k.key) AS x;
    RETURN took;
END
$$;

CREATE FUNCTION public.jobs_claim_unpark(claim_limit integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    keys text[];
    rooms bigint[];
BEGIN
    WITH RECURSIVE waited_for AS (
        -- The keys jobs are parked behind: one index descent per key, however many wait behind it.
        -- From after '': the jobs waiting for their turn in a sequence, which only their head's end releases.
        (SELECT j.parked_on AS key
         FROM jobs AS j
         WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on > ''
         ORDER BY j.parked_on
         LIMIT 1)
        UNION ALL
        SELECT (SELECT j.parked_on
                FROM jobs AS j
                WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on > w.key
                ORDER BY j.parked_on
                LIMIT 1)
        FROM waited_for AS w
        WHERE w.key IS NOT NULL
    ), room AS (
        SELECT w.key, greatest(0, least(
            4 * claim_limit,
            CASE WHEN ks.held_until > clock_timestamp() THEN 0 END,
            CASE WHEN l.max_running > 0 THEN l.max_running - r.running END,
            CASE WHEN l.rate_per_second > 0
                 THEN floor(jobs_key_tokens(w.key, l.rate_per_second, l.burst, ks.tokens, ks.refilled_at,
                                            clock_timestamp())) END,
            CASE WHEN h.bound > 0 THEN h.bound - r.running END))::bigint AS n
        FROM waited_for AS w
        LEFT JOIN job_limits AS l ON l.key = w.key
        LEFT JOIN job_key_state AS ks ON ks.key = w.key
        CROSS JOIN LATERAL (SELECT coalesce(sum(t.running), 0) AS running
                            FROM job_running_tallies AS t WHERE t.key = w.key) AS r
        -- The own bound of the first job waiting: every job of a key is meant to carry the same.
        CROSS JOIN LATERAL (SELECT o.bound
                            FROM jobs AS j, unnest(j.limit_keys, j.limit_key_bounds) AS o(key, bound)
                            WHERE j.state IN ('pending', 'retry_wait') AND j.parked_on = w.key AND o.key = w.key
                            ORDER BY j.priority DESC, j.run_after, j.job_id
                            LIMIT 1) AS h
        WHERE w.key IS NOT NULL
    )
    SELECT array_agg(rm.key), array_agg(rm.n)
    INTO keys, rooms
    FROM room AS rm
    WHERE rm.n > 0;
    IF keys IS NULL THEN
        RETURN;
    END IF;
    UPDATE jobs AS j
    SET parked_on = NULL
    FROM unnest(keys, rooms) AS rm(key, n)
    CROSS JOIN LATERAL (SELECT p.job_id
                        FROM jobs AS p
                        WHERE p.state IN ('pending', 'retry_wait') AND p.parked_on = rm.key
                        ORDER BY p.priority DESC, p.run_after, p.job_id
                        LIMIT rm.n
                        FOR UPDATE OF p SKIP LOCKED) AS back
    WHERE j.job_id = back.job_id;
END
$$;

CREATE FUNCTION public.jobs_claim_with_own_keys(limited text[], locked uuid[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN (SELECT array_agg(k.key ORDER BY hashtext(k.key), k.key)
            FROM (SELECT u.key FROM unnest(limited) AS u(key)
                  UNION
                  SELECT o.key
                  FROM jobs AS j, unnest(j.limit_keys, j.limit_key_bounds) AS o(key, bound)
                  WHERE j.job_id = ANY (locked) AND j.limit_keys <> '{}'
                    AND (o.bound > 0
                         OR EXISTS (SELECT 1 FROM job_limits AS l
                                    WHERE l.key = o.key AND (l.max_running > 0 OR l.rate_per_second > 0))
                         OR EXISTS (SELECT 1 FROM job_key_state AS ks
                                    WHERE ks.key = o.key AND ks.held_until > clock_timestamp()))) AS k);
END
$$;

CREATE FUNCTION public.jobs_declared_keys(kind_keys jsonb, kind text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY(SELECT jsonb_array_elements_text(kind_keys -> kind)) $$;

CREATE FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
        WITH doomed AS (
            SELECT j.job_id
            FROM jobs AS j
            WHERE j.job_id = ANY (job_ids)
              AND j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
              AND j.finished_at < clock_timestamp()
                  - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
              AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ), events AS (
            DELETE FROM job_events AS e USING doomed AS d WHERE e.job_id = d.job_id
        ), results AS (
            DELETE FROM job_results AS r USING doomed AS d WHERE r.job_id = d.job_id
        )
        DELETE FROM jobs AS j
        USING doomed AS d
        WHERE j.job_id = d.job_id
        RETURNING j.job_id
    $$;

CREATE FUNCTION public.jobs_effective_keys(tenant text, kind text, kind_keys text[], own_keys text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY[jobs_kind_key(kind), jobs_tenant_key(tenant)] || coalesce(kind_keys, '{}') || own_keys $$;

CREATE FUNCTION public.jobs_fold_key_charges(of_key text) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
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

CREATE FUNCTION public.jobs_hold_key(hold_key text, hold_until timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE sql
    AS $$
        INSERT INTO job_key_state AS s (key, held_until) VALUES (hold_key, hold_until)
        ON CONFLICT (key) DO UPDATE
            SET held_until = greatest(coalesce(s.held_until, EXCLUDED.held_until), EXCLUDED.held_until)
        RETURNING held_until
    $$;

CREATE FUNCTION public.jobs_key_lock_id(what text, of_tenant text, of_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT hashtextextended(what || ':' || length(of_tenant) || ':' || of_tenant || '/' || of_key, 39) $$;

CREATE FUNCTION public.jobs_key_tenant(key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN starts_with(key, 'tenant:') THEN split_part(substr(key, 8), '/', 1) END $$;

CREATE FUNCTION public.jobs_key_tokens(of_key text, rate double precision, burst integer, tokens double precision, refilled_at timestamp with time zone, at timestamp with time zone) RETURNS double precision
    LANGUAGE plpgsql STABLE
    SET search_path TO 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN jobs_bucket_tokens(rate, burst, tokens, refilled_at, at)
           - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c WHERE c.key = of_key), 0);
END
$$;

CREATE FUNCTION public.jobs_kind_key(kind text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'kind:' || kind $$;

CREATE FUNCTION public.jobs_new_job_id() RETURNS uuid
    LANGUAGE sql
    AS $$
        SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                              PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                                              * 1000)::bigint) FROM 3)
                                              FROM 1 FOR 6),
                                      52, 1),
                              53, 1),
                      'hex')::uuid
    $$;

CREATE FUNCTION public.jobs_next_state_after_failure(category public.error_category, cancel_requested boolean, attempts integer, max_attempts integer, deadline timestamp with time zone, retry_at timestamp with time zone, waiting_state public.job_state) RETURNS TABLE(next_state public.job_state, cause public.failure_cause)
    LANGUAGE sql IMMUTABLE ROWS 1 PARALLEL SAFE
    AS $$
        SELECT CASE decided.cause
                   WHEN 'cancel_requested' THEN 'cancelled'
                   WHEN 'outcome_unknown' THEN 'outcome_unknown'
                   WHEN 'retry' THEN waiting_state
                   ELSE 'failed'
               END::job_state,
               decided.cause
        FROM (SELECT CASE
                  WHEN cancel_requested THEN 'cancel_requested'
                  WHEN category = 'outcome_unknown' THEN 'outcome_unknown'
                  WHEN category = 'permanent' THEN 'permanent'
                  WHEN attempts >= max_attempts THEN 'attempts_exhausted'
                  WHEN deadline IS NOT NULL AND deadline <= retry_at THEN 'deadline'
                  ELSE 'retry'
              END::failure_cause AS cause) AS decided
    $$;

CREATE FUNCTION public.jobs_notify_runnable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Identical notifications in one transaction are folded into one: one wake-up per batch.
    PERFORM pg_notify('jobs_runnable', '');
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_notify_stop() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('jobs_stop', NEW.job_id::text);
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_own_key(tenant text, name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'tenant:' || tenant || '/' || name $$;

CREATE FUNCTION public.jobs_record_event() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_nestloop TO 'off'
    SET jit TO 'off'
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

CREATE FUNCTION public.jobs_retention_floor() RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT interval '1 hour' $$;

CREATE FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
        SELECT j.job_id
        FROM jobs AS j
        WHERE j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
          AND j.finished_at < clock_timestamp()
              - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
          AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ORDER BY j.finished_at
        LIMIT max_jobs
        FOR UPDATE OF j SKIP LOCKED
    $$;

CREATE FUNCTION public.jobs_retry_backoff(attempt integer, base_seconds double precision, cap_seconds double precision) RETURNS interval
    LANGUAGE sql PARALLEL RESTRICTED
    AS $$ SELECT make_interval(secs => random() * jobs_retry_backoff_ceiling(attempt, base_seconds, cap_seconds)) $$;

CREATE FUNCTION public.jobs_retry_backoff_ceiling(attempt integer, base_seconds double precision, cap_seconds double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE
            WHEN base_seconds <= 0 OR cap_seconds <= 0 THEN 0
            WHEN greatest(attempt - 1, 0) >= least(1023, (ln(cap_seconds) - ln(base_seconds)) / ln(2))
                THEN cap_seconds
            ELSE base_seconds * power(2::double precision, greatest(attempt - 1, 0))
        END
    $$;

CREATE FUNCTION public.jobs_running_tally_keys(kind text, tenant text, running_keys text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY[jobs_kind_key(kind), jobs_tenant_key(tenant)] || coalesce(running_keys[3:], '{}') $$;

CREATE FUNCTION public.jobs_running_under(keys text[]) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_object_agg(r.key, r.n), '{}')
            FROM (SELECT t.key, sum(t.running) AS n
                  FROM job_running_tallies AS t
                  WHERE t.key = ANY (keys)
                  GROUP BY t.key) AS r);
END
$$;

CREATE FUNCTION public.jobs_sequence_hold(of_tenant text, of_key text, except_job uuid, head_only boolean) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
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

CREATE FUNCTION public.jobs_sequence_rejoin() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
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

CREATE FUNCTION public.jobs_sequence_release() RETURNS trigger
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

CREATE FUNCTION public.jobs_sequence_release_next(tenants text[], keys text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
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

CREATE FUNCTION public.jobs_settle_dependents() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
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
END $_$;

CREATE FUNCTION public.jobs_tally_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO job_running_tallies AS t (key, holder, running)
    SELECT d.key, pg_backend_pid(), -count(*)
    FROM (SELECT unnest(jobs_running_tally_keys(o.kind, o.tenant, o.running_keys)) AS key
          FROM old_rows AS o
          WHERE o.state = 'running') AS d
    GROUP BY d.key
    ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running;
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_tally_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM job_running_tallies;
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_tenant_key(tenant text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'tenant:' || tenant $$;

CREATE FUNCTION public.jobs_tenant_visible(row_tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT row_tenant = coalesce(nullif(current_setting('jobs.tenant', true), ''), row_tenant) $$;

CREATE FUNCTION public.jobs_tend_running_tallies() RETURNS text[]
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET jit TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    corrected text[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(7310003) THEN
        RETURN '{}';
    END IF;
    WITH gone AS (
        DELETE FROM job_running_tallies AS t
        WHERE t.holder <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = t.holder)
        RETURNING t.key, t.running
    )
    INSERT INTO job_running_tallies AS t (key, holder, running)
    SELECT g.key, 0, sum(g.running) FROM gone AS g GROUP BY g.key
    ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running;
    DELETE FROM job_running_tallies AS t
    WHERE t.holder = 0 AND t.running = 0
      AND NOT EXISTS (SELECT 1 FROM job_running_tallies AS o WHERE o.key = t.key AND o.holder <> 0);

    WITH counted AS (
        SELECT k.key, count(*) AS n
        FROM jobs AS j, unnest(jobs_running_tally_keys(j.kind, j.tenant, j.running_keys)) AS k(key)
        WHERE j.state = 'running'
        GROUP BY k.key
    ), tallied AS (
        SELECT t.key, sum(t.running) AS n FROM job_running_tallies AS t GROUP BY t.key
    ), differences AS (
        SELECT coalesce(c.key, t.key) AS key, coalesce(c.n, 0) - coalesce(t.n, 0) AS n
        FROM counted AS c
        FULL JOIN tallied AS t ON t.key = c.key
        WHERE coalesce(c.n, 0) <> coalesce(t.n, 0)
    ), fixed AS (
        INSERT INTO job_running_tallies AS t (key, holder, running)
        SELECT d.key, 0, d.n FROM differences AS d
        ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running
        RETURNING t.key
    )
    SELECT coalesce(array_agg(f.key ORDER BY f.key), '{}') INTO corrected FROM fixed AS f;
    RETURN corrected;
END
$$;

CREATE FUNCTION public.jobs_waiting_reason(for_job uuid) RETURNS TABLE(reason text, key text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
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

CREATE TABLE public.admin_actions (
    action_id bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text DEFAULT ''::text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL
);

ALTER TABLE public.admin_actions ALTER COLUMN action_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.admin_actions_action_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.delivery_set_members (
    set_id uuid NOT NULL,
    name text NOT NULL,
    job_id uuid NOT NULL,
    CONSTRAINT delivery_set_members_name_check CHECK (((length(name) >= 1) AND (length(name) <= 128)))
);

CREATE TABLE public.delivery_sets (
    set_id uuid DEFAULT gen_random_uuid() NOT NULL,
    tenant text NOT NULL,
    resource_key text NOT NULL,
    resource_version bigint NOT NULL,
    failure_policy public.delivery_set_failure_policy NOT NULL,
    member_count integer NOT NULL,
    fan_in_job_id uuid,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT delivery_sets_member_count_check CHECK (((member_count >= 1) AND (member_count <= 100))),
    CONSTRAINT delivery_sets_resource_version_check CHECK ((resource_version >= 1))
);

CREATE TABLE public.job_attempt_errors (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    category public.error_category NOT NULL,
    message text NOT NULL,
    traceback text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_change_watchers (
    listener text NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.job_checkpoints (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    stage text NOT NULL,
    data bytea NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_events (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    sequence bigint NOT NULL,
    from_state public.job_state,
    to_state public.job_state NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_key_charges (
    key text NOT NULL,
    holder integer NOT NULL,
    taken bigint NOT NULL,
    CONSTRAINT job_key_charges_taken_check CHECK ((taken >= 0))
);

CREATE TABLE public.job_key_state (
    key text NOT NULL,
    tokens double precision,
    refilled_at timestamp with time zone,
    held_until timestamp with time zone,
    CONSTRAINT job_key_state_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200)))
);

CREATE TABLE public.job_kind_publishers (
    kind text NOT NULL,
    publisher text NOT NULL,
    policy_digest bytea NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_kinds (
    kind text NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base_seconds double precision NOT NULL,
    backoff_cap_seconds double precision NOT NULL,
    timeout_seconds double precision,
    external_side_effects boolean NOT NULL,
    limit_keys text[] DEFAULT '{}'::text[] NOT NULL,
    executor public.job_executor NOT NULL,
    policy_digest bytea NOT NULL,
    published_by text NOT NULL,
    publisher_started_at timestamp with time zone NOT NULL,
    first_published_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    last_published_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    retired_at timestamp with time zone,
    retired_by text,
    CONSTRAINT job_kinds_backoff_base_seconds_check CHECK ((backoff_base_seconds >= (0)::double precision)),
    CONSTRAINT job_kinds_backoff_cap_seconds_check CHECK ((backoff_cap_seconds >= (0)::double precision)),
    CONSTRAINT job_kinds_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_kinds_timeout_seconds_check CHECK ((timeout_seconds > (0)::double precision))
);

CREATE TABLE public.job_limits (
    key text NOT NULL,
    max_running integer DEFAULT 0 NOT NULL,
    rate_per_second double precision DEFAULT 0 NOT NULL,
    burst integer DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_by text NOT NULL,
    CONSTRAINT job_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT job_limits_burst_honourable CHECK (((burst >= 1) AND (burst <= 1000000))),
    CONSTRAINT job_limits_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT job_limits_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT job_limits_max_running_honourable CHECK (((max_running >= 0) AND (max_running <= 1000000))),
    CONSTRAINT job_limits_rate_honourable CHECK (((rate_per_second = (0)::double precision) OR ((rate_per_second >= (0.000001)::double precision) AND (rate_per_second <= ('1000000'::numeric)::double precision)))),
    CONSTRAINT job_limits_rate_per_second_check CHECK (((rate_per_second >= (0)::double precision) AND (rate_per_second < 'Infinity'::double precision)))
);

CREATE TABLE public.job_logs (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    fencing_token bigint NOT NULL,
    attempt integer NOT NULL,
    sequence integer NOT NULL,
    at timestamp with time zone NOT NULL,
    level text NOT NULL,
    logger text NOT NULL,
    message text NOT NULL,
    CONSTRAINT job_logs_sequence_check CHECK ((sequence >= 1))
);

CREATE TABLE public.job_progress (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    fraction double precision NOT NULL,
    message text DEFAULT ''::text NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    revision bigint DEFAULT 1 NOT NULL,
    CONSTRAINT job_progress_fraction_check CHECK (((fraction >= (0)::double precision) AND (fraction <= (1)::double precision)))
);

CREATE TABLE public.job_receipts (
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    step text NOT NULL,
    fencing_token bigint NOT NULL,
    intent bytea NOT NULL,
    receipt bytea,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    confirmed_at timestamp with time zone
);

CREATE TABLE public.job_results (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    payload bytea NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_running_tallies (
    key text NOT NULL,
    holder integer NOT NULL,
    running bigint NOT NULL
);

CREATE TABLE public.jobs (
    job_id uuid DEFAULT public.jobs_new_job_id() NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    state public.job_state NOT NULL,
    payload bytea NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    deadline timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base_seconds double precision DEFAULT 1 NOT NULL,
    backoff_cap_seconds double precision DEFAULT 300 NOT NULL,
    idempotency_key text,
    request_digest bytea,
    resource_key text,
    resource_version bigint,
    depends_on uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    fencing_token bigint DEFAULT 0 NOT NULL,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    last_error_category public.error_category,
    last_error_message text,
    sequence bigint DEFAULT 1 NOT NULL,
    transition_actor text DEFAULT 'system'::text NOT NULL,
    transition_reason text DEFAULT ''::text NOT NULL,
    retry_budget integer NOT NULL,
    input_digest bytea,
    traceparent text,
    tracestate text,
    duplicate_risk_accepted_attempt integer,
    limit_keys text[] DEFAULT '{}'::text[] NOT NULL,
    limit_key_bounds integer[] DEFAULT '{}'::integer[] NOT NULL,
    running_keys text[] DEFAULT '{}'::text[] NOT NULL,
    waits_for_manual_retry boolean DEFAULT false NOT NULL,
    parked_on text,
    parent_job_id uuid,
    sequence_key text,
    sequence_position bigint,
    singleton_key text,
    debounce_key text,
    debounce_max_at timestamp with time zone,
    CONSTRAINT jobs_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT jobs_backoff_base_seconds_check CHECK ((backoff_base_seconds >= (0)::double precision)),
    CONSTRAINT jobs_backoff_cap_seconds_check CHECK ((backoff_cap_seconds >= (0)::double precision)),
    CONSTRAINT jobs_limit_key_bounds_match CHECK ((cardinality(limit_keys) = cardinality(limit_key_bounds))),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_resource_version_with_key CHECK (((resource_key IS NULL) = (resource_version IS NULL))),
    CONSTRAINT jobs_retry_budget_positive CHECK ((retry_budget >= 1)),
    CONSTRAINT jobs_running_has_lease CHECK (((state <> 'running'::public.job_state) OR (lease_expires_at IS NOT NULL)))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.02');

CREATE SEQUENCE public.jobs_sequence_position_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE public.kind_pauses (
    kind text NOT NULL,
    paused_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    paused_by text NOT NULL,
    reason text DEFAULT ''::text NOT NULL
);

CREATE TABLE public.resource_deletions (
    deletion_id bigint NOT NULL,
    tenant text NOT NULL,
    resource_key text NOT NULL,
    deleted_version bigint NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    cancelled_jobs integer NOT NULL,
    deleted_results integer NOT NULL,
    deleted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

ALTER TABLE public.resource_deletions ALTER COLUMN deletion_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.resource_deletions_deletion_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.resource_heads (
    tenant text NOT NULL,
    resource_key text NOT NULL,
    latest_version bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    deleted_version bigint DEFAULT 0 NOT NULL,
    CONSTRAINT resource_heads_deleted_version_check CHECK ((deleted_version >= 0))
);

CREATE TABLE public.schedule_fires (
    schedule_uid uuid NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    manual boolean DEFAULT false NOT NULL,
    tenant text NOT NULL,
    outcome text NOT NULL,
    job_id uuid,
    detail text DEFAULT ''::text NOT NULL,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT schedule_fires_outcome_check CHECK ((outcome = ANY (ARRAY['submitted'::text, 'skipped'::text, 'missed'::text, 'buffered'::text, 'refused'::text])))
);

CREATE TABLE public.schedules (
    tenant text NOT NULL,
    schedule_id text NOT NULL,
    schedule_uid uuid DEFAULT gen_random_uuid() NOT NULL,
    cron text NOT NULL,
    time_zone text NOT NULL,
    overlap_policy text NOT NULL,
    catchup_window_seconds bigint NOT NULL,
    kind text NOT NULL,
    payload bytea DEFAULT '\x'::bytea NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 0 NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    note text DEFAULT ''::text NOT NULL,
    next_fire_at timestamp with time zone NOT NULL,
    buffered_fire_at timestamp with time zone,
    last_fire_at timestamp with time zone,
    last_job_id uuid,
    fires_submitted bigint DEFAULT 0 NOT NULL,
    fires_missed bigint DEFAULT 0 NOT NULL,
    fires_skipped bigint DEFAULT 0 NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    created_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    limit_keys text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT schedules_catchup_window_seconds_check CHECK ((catchup_window_seconds > 0)),
    CONSTRAINT schedules_overlap_policy_check CHECK ((overlap_policy = ANY (ARRAY['skip'::text, 'buffer_one'::text, 'allow'::text]))),
    CONSTRAINT schedules_schedule_id_check CHECK (((length(schedule_id) >= 1) AND (length(schedule_id) <= 128)))
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_routines (
    file text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.tenant_weights (
    tenant text NOT NULL,
    weight integer NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_by text NOT NULL,
    CONSTRAINT tenant_weights_weight_check CHECK (((weight >= 1) AND (weight <= 10000)))
);

ALTER TABLE ONLY public.admin_actions
    ADD CONSTRAINT admin_actions_pkey PRIMARY KEY (action_id);

ALTER TABLE ONLY public.delivery_set_members
    ADD CONSTRAINT delivery_set_members_pkey PRIMARY KEY (set_id, name);

ALTER TABLE ONLY public.delivery_sets
    ADD CONSTRAINT delivery_sets_pkey PRIMARY KEY (set_id);

ALTER TABLE ONLY public.delivery_sets
    ADD CONSTRAINT delivery_sets_tenant_resource_key_resource_version_key UNIQUE (tenant, resource_key, resource_version);

ALTER TABLE ONLY public.job_attempt_errors
    ADD CONSTRAINT job_attempt_errors_pkey PRIMARY KEY (job_id, fencing_token);

ALTER TABLE ONLY public.job_change_watchers
    ADD CONSTRAINT job_change_watchers_pkey PRIMARY KEY (listener);

ALTER TABLE ONLY public.job_checkpoints
    ADD CONSTRAINT job_checkpoints_pkey PRIMARY KEY (job_id, stage);

ALTER TABLE ONLY public.job_events
    ADD CONSTRAINT job_events_pkey PRIMARY KEY (job_id, sequence);

ALTER TABLE ONLY public.job_key_charges
    ADD CONSTRAINT job_key_charges_pkey PRIMARY KEY (key, holder);

ALTER TABLE ONLY public.job_key_state
    ADD CONSTRAINT job_key_state_pkey PRIMARY KEY (key);

ALTER TABLE ONLY public.job_kind_publishers
    ADD CONSTRAINT job_kind_publishers_pkey PRIMARY KEY (kind, publisher);

ALTER TABLE ONLY public.job_kinds
    ADD CONSTRAINT job_kinds_pkey PRIMARY KEY (kind);

ALTER TABLE ONLY public.job_limits
    ADD CONSTRAINT job_limits_pkey PRIMARY KEY (key);

ALTER TABLE ONLY public.job_logs
    ADD CONSTRAINT job_logs_pkey PRIMARY KEY (job_id, fencing_token, sequence);

ALTER TABLE ONLY public.job_progress
    ADD CONSTRAINT job_progress_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY public.job_receipts
    ADD CONSTRAINT job_receipts_pkey PRIMARY KEY (job_id, attempt, step);

ALTER TABLE ONLY public.job_results
    ADD CONSTRAINT job_results_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY public.job_running_tallies
    ADD CONSTRAINT job_running_tallies_pkey PRIMARY KEY (key, holder);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_id);

ALTER TABLE public.jobs
    ADD CONSTRAINT jobs_traceparent_w3c CHECK ((traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)) NOT VALID;

ALTER TABLE public.jobs
    ADD CONSTRAINT jobs_tracestate_bounded CHECK (((tracestate IS NULL) OR ((traceparent IS NOT NULL) AND (length(tracestate) <= 512)))) NOT VALID;

ALTER TABLE ONLY public.kind_pauses
    ADD CONSTRAINT kind_pauses_pkey PRIMARY KEY (kind);

ALTER TABLE ONLY public.resource_deletions
    ADD CONSTRAINT resource_deletions_pkey PRIMARY KEY (deletion_id);

ALTER TABLE ONLY public.resource_heads
    ADD CONSTRAINT resource_heads_pkey PRIMARY KEY (tenant, resource_key);

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_pkey PRIMARY KEY (schedule_uid, fire_at, manual);

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (tenant, schedule_id);

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_schedule_uid_key UNIQUE (schedule_uid);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.schema_routines
    ADD CONSTRAINT schema_routines_pkey PRIMARY KEY (file);

ALTER TABLE ONLY public.tenant_weights
    ADD CONSTRAINT tenant_weights_pkey PRIMARY KEY (tenant);

CREATE INDEX admin_actions_at_idx ON public.admin_actions USING btree (at);

CREATE INDEX delivery_set_members_job_idx ON public.delivery_set_members USING btree (job_id);

CREATE INDEX job_kind_publishers_seen_idx ON public.job_kind_publishers USING btree (last_seen_at);

CREATE INDEX jobs_blocked_depends_on_idx ON public.jobs USING gin (depends_on) WHERE (state = 'blocked'::public.job_state);

CREATE INDEX jobs_debounce_open_idx ON public.jobs USING btree (tenant, debounce_key) WHERE ((debounce_key IS NOT NULL) AND (state = 'pending'::public.job_state) AND (fencing_token = 0));

CREATE INDEX jobs_dedupe_input_idx ON public.jobs USING btree (tenant, kind, input_digest, COALESCE(finished_at, 'infinity'::timestamp with time zone)) WHERE ((input_digest IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'retry_wait'::public.job_state, 'running'::public.job_state, 'succeeded'::public.job_state])));

CREATE INDEX jobs_depends_on_idx ON public.jobs USING gin (depends_on) WHERE (depends_on <> '{}'::uuid[]);

CREATE INDEX jobs_finished_idx ON public.jobs USING btree (finished_at) WHERE (state = ANY (ARRAY['succeeded'::public.job_state, 'failed'::public.job_state, 'cancelled'::public.job_state, 'superseded'::public.job_state]));

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON public.jobs USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX jobs_parent_idx ON public.jobs USING btree (parent_job_id, created_at DESC, job_id DESC) WHERE (parent_job_id IS NOT NULL);

CREATE INDEX jobs_parked_idx ON public.jobs USING btree (parked_on, priority DESC, run_after, job_id) WHERE ((state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state])) AND (parked_on IS NOT NULL));

CREATE INDEX jobs_queue_gauge_idx ON public.jobs USING btree (state, finished_at) WHERE (state = ANY (ARRAY['blocked'::public.job_state, 'failed'::public.job_state, 'outcome_unknown'::public.job_state]));

CREATE INDEX jobs_runnable_idx ON public.jobs USING btree (kind, tenant, priority DESC, run_after, job_id) WHERE ((state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state])) AND (parked_on IS NULL));

CREATE INDEX jobs_running_lease_idx ON public.jobs USING btree (lease_expires_at) WHERE (state = 'running'::public.job_state);

CREATE INDEX jobs_sequence_live_idx ON public.jobs USING btree (tenant, sequence_key, sequence_position) WHERE ((sequence_key IS NOT NULL) AND (state <> ALL (ARRAY['succeeded'::public.job_state, 'cancelled'::public.job_state, 'superseded'::public.job_state])));

CREATE UNIQUE INDEX jobs_singleton_active_idx ON public.jobs USING btree (tenant, singleton_key) WHERE ((singleton_key IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state, 'running'::public.job_state])));

CREATE INDEX jobs_tenant_created_idx ON public.jobs USING btree (tenant, created_at DESC, job_id DESC);

CREATE INDEX jobs_tenant_queued_idx ON public.jobs USING btree (tenant) WHERE (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state]));

CREATE INDEX jobs_tenant_resource_idx ON public.jobs USING btree (tenant, resource_key, resource_version DESC) WHERE (resource_key IS NOT NULL);

CREATE INDEX jobs_waiting_deadline_idx ON public.jobs USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state])));

CREATE INDEX resource_deletions_key_idx ON public.resource_deletions USING btree (tenant, resource_key, deleted_at);

CREATE INDEX schedule_fires_recorded_idx ON public.schedule_fires USING btree (recorded_at);

CREATE INDEX schedules_buffered_idx ON public.schedules USING btree (buffered_fire_at) WHERE (buffered_fire_at IS NOT NULL);

CREATE INDEX schedules_due_idx ON public.schedules USING btree (next_fire_at) WHERE (NOT paused);

CREATE TRIGGER jobs_bump_sequence BEFORE UPDATE ON public.jobs FOR EACH ROW WHEN ((new.sequence IS DISTINCT FROM
        CASE
            WHEN ((old.state IS DISTINCT FROM new.state) OR (old.cancel_requested IS DISTINCT FROM new.cancel_requested)) THEN (old.sequence + 1)
            ELSE old.sequence
        END)) EXECUTE FUNCTION public.jobs_bump_sequence();

CREATE TRIGGER jobs_notify_runnable_insert AFTER INSERT ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_notify_runnable();

CREATE TRIGGER jobs_notify_stop AFTER UPDATE ON public.jobs FOR EACH ROW WHEN (((old.state = 'running'::public.job_state) AND ((new.cancel_requested AND (NOT old.cancel_requested)) OR (new.state = 'superseded'::public.job_state)))) EXECUTE FUNCTION public.jobs_notify_stop();

CREATE TRIGGER jobs_record_insert AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_record_event();

CREATE TRIGGER jobs_record_update AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_record_event();

CREATE TRIGGER jobs_sequence_rejoin BEFORE UPDATE OF state ON public.jobs FOR EACH ROW WHEN (((new.sequence_key IS NOT NULL) AND (old.state = ANY (ARRAY['succeeded'::public.job_state, 'cancelled'::public.job_state, 'superseded'::public.job_state, 'failed'::public.job_state, 'outcome_unknown'::public.job_state])) AND (new.state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'retry_wait'::public.job_state])))) EXECUTE FUNCTION public.jobs_sequence_rejoin();

CREATE TRIGGER jobs_sequence_release AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_sequence_release();

CREATE TRIGGER jobs_sequence_release_deleted AFTER DELETE ON public.jobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_sequence_release();

CREATE TRIGGER jobs_settle_dependents AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_settle_dependents();

CREATE TRIGGER jobs_tally_deleted AFTER DELETE ON public.jobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_tally_deleted();

CREATE TRIGGER jobs_tally_truncated AFTER TRUNCATE ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_tally_truncated();

ALTER TABLE ONLY public.delivery_set_members
    ADD CONSTRAINT delivery_set_members_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.delivery_set_members
    ADD CONSTRAINT delivery_set_members_set_id_fkey FOREIGN KEY (set_id) REFERENCES public.delivery_sets(set_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.delivery_sets
    ADD CONSTRAINT delivery_sets_fan_in_job_id_fkey FOREIGN KEY (fan_in_job_id) REFERENCES public.jobs(job_id) ON DELETE SET NULL;

ALTER TABLE ONLY public.job_attempt_errors
    ADD CONSTRAINT job_attempt_errors_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_checkpoints
    ADD CONSTRAINT job_checkpoints_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_logs
    ADD CONSTRAINT job_logs_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_progress
    ADD CONSTRAINT job_progress_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_receipts
    ADD CONSTRAINT job_receipts_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_schedule_uid_fkey FOREIGN KEY (schedule_uid) REFERENCES public.schedules(schedule_uid) ON DELETE CASCADE;

ALTER TABLE public.delivery_set_members ENABLE ROW LEVEL SECURITY;

CREATE POLICY delivery_set_members_api_tenant ON public.delivery_set_members TO jobs_api USING ((EXISTS ( SELECT 1
   FROM public.delivery_sets s
  WHERE (s.set_id = delivery_set_members.set_id)))) WITH CHECK ((EXISTS ( SELECT 1
   FROM public.delivery_sets s
  WHERE (s.set_id = delivery_set_members.set_id))));

ALTER TABLE public.delivery_sets ENABLE ROW LEVEL SECURITY;

CREATE POLICY delivery_sets_api_tenant ON public.delivery_sets TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.job_attempt_errors ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_attempt_errors_api_tenant ON public.job_attempt_errors TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.job_checkpoints ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_checkpoints_api_tenant ON public.job_checkpoints TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

CREATE POLICY job_checkpoints_worker_read ON public.job_checkpoints FOR SELECT TO jobs_worker USING (true);

ALTER TABLE public.job_events ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_events_api_tenant ON public.job_events TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

CREATE POLICY job_events_worker_insert ON public.job_events FOR INSERT TO jobs_worker WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_events.job_id) AND (j.tenant = job_events.tenant) AND (j.sequence = job_events.sequence) AND (j.state = job_events.to_state)))));

ALTER TABLE public.job_logs ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_logs_api_tenant ON public.job_logs TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.job_progress ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_progress_api_tenant ON public.job_progress TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.job_receipts ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_receipts_api_tenant ON public.job_receipts FOR SELECT TO jobs_api USING ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE (j.job_id = job_receipts.job_id))));

CREATE POLICY job_receipts_worker_insert ON public.job_receipts FOR INSERT TO jobs_worker WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token)))));

CREATE POLICY job_receipts_worker_read ON public.job_receipts FOR SELECT TO jobs_worker USING (true);

CREATE POLICY job_receipts_worker_update ON public.job_receipts FOR UPDATE TO jobs_worker USING ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token))))) WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token)))));

ALTER TABLE public.job_results ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_results_api_tenant ON public.job_results TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.jobs ENABLE ROW LEVEL SECURITY;

CREATE POLICY jobs_api_tenant ON public.jobs TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

CREATE POLICY jobs_worker_read ON public.jobs FOR SELECT TO jobs_worker USING (true);

CREATE POLICY jobs_worker_update ON public.jobs FOR UPDATE TO jobs_worker USING ((state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'running'::public.job_state, 'retry_wait'::public.job_state]))) WITH CHECK (
CASE
    WHEN (state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'running'::public.job_state, 'retry_wait'::public.job_state, 'outcome_unknown'::public.job_state])) THEN (finished_at IS NULL)
    WHEN (state = 'failed'::public.job_state) THEN ((finished_at >= now()) AND (finished_at <= clock_timestamp()))
    WHEN (state = 'cancelled'::public.job_state) THEN (cancel_requested AND ((finished_at >= now()) AND (finished_at <= clock_timestamp())))
    ELSE false
END);

ALTER TABLE public.resource_deletions ENABLE ROW LEVEL SECURITY;

CREATE POLICY resource_deletions_api_tenant ON public.resource_deletions TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.resource_heads ENABLE ROW LEVEL SECURITY;

CREATE POLICY resource_heads_api_tenant ON public.resource_heads TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.schedule_fires ENABLE ROW LEVEL SECURITY;

CREATE POLICY schedule_fires_api_tenant ON public.schedule_fires TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.schedules ENABLE ROW LEVEL SECURITY;

CREATE POLICY schedules_api_tenant ON public.schedules TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

GRANT USAGE ON SCHEMA public TO jobs_api;
GRANT USAGE ON SCHEMA public TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_fold_key_charges(of_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_fold_key_charges(of_key text) TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_sequence_release_next(tenants text[], keys text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_sequence_release_next(tenants text[], keys text[]) TO jobs_api;
GRANT ALL ON FUNCTION public.jobs_sequence_release_next(tenants text[], keys text[]) TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_tend_running_tallies() FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_tend_running_tallies() TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_waiting_reason(for_job uuid) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_waiting_reason(for_job uuid) TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.admin_actions TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.delivery_set_members TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.delivery_sets TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.job_attempt_errors TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_change_watchers TO jobs_api;
GRANT SELECT ON TABLE public.job_change_watchers TO jobs_worker;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_checkpoints TO jobs_api;
GRANT SELECT ON TABLE public.job_checkpoints TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.job_events TO jobs_api;
GRANT INSERT ON TABLE public.job_events TO jobs_worker;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_key_charges TO jobs_worker;
GRANT SELECT ON TABLE public.job_key_charges TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.job_key_state TO jobs_worker;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_key_state TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_kind_publishers TO jobs_worker;
GRANT SELECT ON TABLE public.job_kind_publishers TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.job_kinds TO jobs_worker;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_kinds TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_limits TO jobs_api;
GRANT SELECT ON TABLE public.job_limits TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.job_logs TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.job_progress TO jobs_api;

GRANT SELECT ON TABLE public.job_receipts TO jobs_api;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_receipts TO jobs_worker;

GRANT SELECT,INSERT,DELETE ON TABLE public.job_results TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_running_tallies TO jobs_worker;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_running_tallies TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.jobs TO jobs_api;
GRANT SELECT ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(state) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(run_after) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(attempts) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(started_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(finished_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(fencing_token) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(lease_owner) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(lease_expires_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(last_error_category) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(last_error_message) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(sequence) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(transition_actor) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(transition_reason) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(running_keys) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(parked_on) ON TABLE public.jobs TO jobs_worker;

GRANT USAGE ON SEQUENCE public.jobs_sequence_position_seq TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.kind_pauses TO jobs_api;
GRANT SELECT ON TABLE public.kind_pauses TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.resource_deletions TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.resource_heads TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.schedule_fires TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.schedules TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_weights TO jobs_api;
GRANT SELECT ON TABLE public.tenant_weights TO jobs_worker;
