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
    LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM job_change_watchers AS w WHERE w.expires_at > now()) $$;

CREATE FUNCTION public.jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer, claim_lease_seconds double precision) RETURNS TABLE(job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer, fencing_token bigint, lease_expires_at timestamp with time zone, created_at timestamp with time zone, queued_since timestamp with time zone, claimed_at timestamp with time zone, traceparent text, tracestate text)
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_sort TO 'off'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
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
    -- Whether a tenant's key among them is rate-limited: charged per tenant, by what each tenant got.
    tenants_rated boolean;
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
    last_round boolean;
    -- The rooms the session's last claim counted, if any; what the statements that set them and take the
    -- locks return, unused.
    remembered jsonb;
    remembered_text text;
    locks_taken bigint;
    -- Whether a key locked shared is rate-limited, so charged in this backend's row.
    charge_shared boolean;
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
        -- Each tenant's first row in the runnable index's order: its next job, unless that one waits for a
        -- later time or has passed its deadline.
        SELECT o.kind, f.tenant, f.priority, f.run_after, f.runnable
        FROM open_kinds AS o
        CROSS JOIN LATERAL (
            SELECT j.tenant, j.priority, j.run_after,
                   j.run_after <= clock_timestamp() AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
                       AS runnable
            FROM jobs AS j
            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = o.kind
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
            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = t.kind AND j.tenant > t.tenant
            ORDER BY j.tenant, j.priority DESC, j.run_after, j.job_id
            LIMIT 1
        ) AS f
    )
    SELECT array_agg(t.kind ORDER BY t.kind, t.tenant), array_agg(t.tenant ORDER BY t.kind, t.tenant),
           array_agg(h.priority ORDER BY t.kind, t.tenant), array_agg(h.run_after ORDER BY t.kind, t.tenant)
    INTO queue_kinds, queue_tenants, head_priorities, head_ages
    FROM tenants AS t
    CROSS JOIN LATERAL (
        SELECT t.priority, t.run_after
        WHERE t.runnable
        UNION ALL
        -- Looked up only behind a first row that cannot run now (a one-time filter).
        (SELECT j.priority, j.run_after
         FROM jobs AS j
         WHERE NOT t.runnable
           AND j.state IN ('pending', 'retry_wait') AND j.kind = t.kind AND j.tenant = t.tenant
           AND j.run_after <= clock_timestamp()
           AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
         ORDER BY j.priority DESC, j.run_after, j.job_id
         LIMIT 1)
    ) AS h;

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
           coalesce(bool_or(NOT l.key = ANY (c.keys)), false),
           coalesce(bool_or(l.key = ANY (c.keys) AND NOT l.key = ANY (kind_keys) AND l.rate_per_second > 0), false)
    INTO limited, other_limits, tenants_rated
    FROM job_limits AS l
    CROSS JOIN (SELECT kind_keys || ARRAY(SELECT 'tenant:' || q.tenant FROM unnest(queue_tenants) AS q(tenant))
                    AS keys) AS c
    WHERE l.max_running > 0 OR l.rate_per_second > 0;
    IF limited IS NOT NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobs_claim counts running jobs with a snapshot per statement: READ COMMITTED only';
    END IF;

    live := queue_tenants;
    -- Looked up tenant by tenant, an index probe each: grouping the tallies built a hash table per claim.
    SELECT array_agg(CASE WHEN cardinality(live) > 1
                          THEN coalesce((SELECT sum(t.running) FROM job_running_tallies AS t
                                         WHERE t.key = 'tenant:' || u.tenant), 0)
                          ELSE 0 END::bigint ORDER BY u.ord),
           array_agg(coalesce((SELECT w.weight FROM tenant_weights AS w WHERE w.tenant = u.tenant), 1) ORDER BY u.ord)
    INTO running, weights
    FROM unnest(live) WITH ORDINALITY AS u(tenant, ord);
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
            -- No part reaches past the level at which every tenant, filled up to it, would hold the rest of
            -- the batch with one job each to spare for rounding: (rest + running + tenants) / weights. So
            -- each tenant's candidates stop there (one more for floating-point rounding), and the parts come
            -- from about rest + 2 x tenants rows instead of tenants x rest. Not when a tenant's own room caps
            -- it: a capped tenant falls short of the level, and the others rise past it.
            SELECT array_agg(s.tenant), array_agg(s.n)
            INTO shares_of, share_counts
            FROM (SELECT c.tenant, count(*) AS n
                  FROM (SELECT q.tenant
                        FROM unnest(live, running, weights) AS q(tenant, running, weight)
                        JOIN unnest(queue_tenants, head_ages) AS h(tenant, age) ON h.tenant = q.tenant
                        CROSS JOIN (SELECT (least(claim_limit - claimed, coalesce(room, claim_limit)) + sum(v.running)
                                            + count(*))::float8 / sum(v.weight) AS level
                                    FROM unnest(running, weights) AS v(running, weight)) AS lv
                        CROSS JOIN LATERAL generate_series(1, least(
                            claim_limit - claimed,
                            coalesce((tenant_room ->> q.tenant)::integer, claim_limit),
                            CASE WHEN tenant_room = '{}'
                                 THEN greatest(0, floor(lv.level * q.weight - q.running)::bigint + 1) END)) AS i(n)
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
            remembered := nullif(current_setting('jobs.claim_rooms', true), '')::jsonb;
            IF remembered IS NOT NULL
               AND extract(epoch FROM at) - (remembered ->> 'at')::double precision BETWEEN 0 AND 1
               AND (remembered -> 'rooms') ?& limited THEN
                key_rooms := remembered -> 'rooms';
            ELSE
                key_rooms := jobs_claim_rooms_at(limited, at);
            END IF;
            -- In one statement, in the order of `limited`: the aggregate reads the array's rows in order and
            -- takes each row's lock as it reads it.
            SELECT coalesce(array_agg(k.key ORDER BY k.ord) FILTER (WHERE k.shared), '{}'),
                   count(CASE WHEN k.shared THEN pg_advisory_xact_lock_shared(18, hashtext(k.key))
                              ELSE pg_advisory_xact_lock(18, hashtext(k.key)) END)
            INTO shared_keys, locks_taken
            FROM (SELECT u.key, u.ord, coalesce((key_rooms ->> u.key)::bigint >= holders::bigint * claim_limit, false) AS shared
                  FROM unnest(limited) WITH ORDINALITY AS u(key, ord)) AS k;
            keys_locked := true;
            -- The rooms counted in one statement, which keeps them for the session's next judgment too (less
            -- this claim's part of a key held shared, so that a key crossing the bound is judged short): the
            -- room each key leaves, and the part of it this claim may take. OFFSET 0 computes a key's room
            -- once: each reference to it would otherwise repeat its subqueries.
            at := clock_timestamp();
            SELECT min(r.part) FILTER (WHERE r.key = ANY (kind_keys)),
                   coalesce(jsonb_object_agg(substr(r.key, 8), r.part) FILTER (WHERE NOT r.key = ANY (kind_keys)), '{}'),
                   coalesce(bool_or(r.rated AND r.key = ANY (shared_keys)), false),
                   set_config('jobs.claim_rooms',
                              jsonb_build_object('at', extract(epoch FROM at),
                                                 'rooms', jsonb_object_agg(r.key, r.room - r.room / holders))::text,
                              false)
            INTO room, tenant_room, charge_shared, remembered_text
            FROM (SELECT l.key, l.rate_per_second > 0 AS rated, rm.room,
                         CASE WHEN l.key = ANY (shared_keys) THEN rm.room / holders ELSE rm.room END AS part
                  FROM job_limits AS l
                  LEFT JOIN job_key_state AS s ON s.key = l.key
                  CROSS JOIN LATERAL (
                      SELECT greatest(0, least(
                          CASE WHEN l.max_running > 0
                               THEN l.max_running - coalesce((SELECT sum(t.running) FROM job_running_tallies AS t
                                                              WHERE t.key = l.key), 0) END,
                          CASE WHEN l.rate_per_second > 0
                               THEN floor(jobs_bucket_tokens(l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)
                                          - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c
                                                      WHERE c.key = l.key), 0)) END))::bigint AS room OFFSET 0
                  ) AS rm
                  WHERE l.key = ANY (limited) AND (l.max_running > 0 OR l.rate_per_second > 0)) AS r;
        END IF;

        -- The locked rows that fit the room, by share, as the parts were made: all of them when the room
        -- left under every key holds them all (the parts never add up to more than the batch's rest).
        IF coalesce(room, claim_limit) >= cardinality(locked_ids)
           AND (tenant_room = '{}'
                OR (SELECT min(e.value::integer) FROM jsonb_each_text(tenant_room) AS e) >= cardinality(locked_ids)) THEN
            chosen_ids := locked_ids;
            chosen_tenants := locked_tenants;
        ELSE
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
        END IF;

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
            room := room - cardinality(chosen_ids);
        END IF;
        last_round := claimed >= claim_limit OR rounds >= 6 OR coalesce(room = 0, false);

        -- What each tenant got, for the next round's parts and rooms and for the charges to the tenants'
        -- rate-limited keys: not counted when this round is the last and no tenant's key is charged.
        IF cardinality(chosen_ids) = 0 THEN
            got := '{}';
        ELSIF NOT last_round OR (keys_locked AND tenants_rated) THEN
            SELECT coalesce(jsonb_object_agg(c.tenant, c.n), '{}') INTO got
            FROM (SELECT u.tenant, count(*) AS n FROM unnest(chosen_tenants) AS u(tenant) GROUP BY u.tenant) AS c;
            claimed_by_tenant := (SELECT jsonb_object_agg(u.tenant, coalesce((claimed_by_tenant ->> u.tenant)::integer, 0)
                                                                    + coalesce((got ->> u.tenant)::integer, 0))
                                  FROM unnest(queue_tenants) AS u(tenant));
            tenant_room := (SELECT coalesce(jsonb_object_agg(e.key, e.value::integer - coalesce((got ->> e.key)::integer, 0)), '{}')
                            FROM jsonb_each_text(tenant_room) AS e);
        END IF;

        EXIT WHEN last_round;
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
        -- Only when a key held shared was rate-limited as its room was counted.
        IF charge_shared THEN
            INSERT INTO job_key_charges AS c (key, holder, taken)
            SELECT l.key, pg_backend_pid(), x.n
            FROM job_limits AS l
            CROSS JOIN LATERAL (SELECT CASE WHEN l.key = ANY (kind_keys) THEN claimed
                                            ELSE coalesce((claimed_by_tenant ->> substr(l.key, 8))::integer, 0) END AS n) AS x
            WHERE l.key = ANY (shared_keys) AND l.rate_per_second > 0 AND x.n > 0
            ON CONFLICT (key, holder) DO UPDATE SET taken = c.taken + EXCLUDED.taken;
        END IF;
        IF cardinality(shared_keys) < cardinality(limited) THEN
            SELECT jsonb_object_agg(k.key, CASE WHEN k.key = ANY (kind_keys)
                                                THEN claimed
                                                ELSE coalesce((claimed_by_tenant ->> substr(k.key, 8))::integer, 0) END)
            INTO charged_of
            FROM unnest(limited) AS k(key);
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

CREATE FUNCTION public.jobs_claim_admit(worker_id text, lease_seconds double precision, max_jobs integer, candidate_ids uuid[]) RETURNS TABLE(job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer, fencing_token bigint, lease_expires_at timestamp with time zone, created_at timestamp with time zone, queued_since timestamp with time zone, claimed_at timestamp with time zone, traceparent text, tracestate text)
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'auto'
    SET enable_seqscan TO 'off'
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

        -- Read after the locks, in this statement's own snapshot.
        running := jobs_running_under(bounded);

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

CREATE FUNCTION public.jobs_claim_candidates(candidate_ids uuid[], kind_keys jsonb) RETURNS TABLE(ord bigint, job_id uuid, keys text[], own_keys text[], own_bounds integer[])
    LANGUAGE sql STABLE
    SET search_path TO 'public', 'pg_temp'
    AS $$
        SELECT u.ord, j.job_id,
               jobs_effective_keys(j.tenant, j.kind,
                                   ARRAY(SELECT jsonb_array_elements_text(coalesce(kind_keys -> j.kind, '[]'))),
                                   j.limit_keys),
               j.limit_keys, j.limit_key_bounds
        FROM unnest(candidate_ids) WITH ORDINALITY AS u(job_id, ord)
        JOIN jobs AS j ON j.job_id = u.job_id
    $$;

CREATE FUNCTION public.jobs_claim_fair(claim_worker text, claim_kinds text[], claim_limit integer, claim_lease_seconds double precision) RETURNS TABLE(job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer, fencing_token bigint, lease_expires_at timestamp with time zone, created_at timestamp with time zone, queued_since timestamp with time zone, claimed_at timestamp with time zone, traceparent text, tracestate text)
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_sort TO 'off'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
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

CREATE FUNCTION public.jobs_claim_needs_admission(own_keys text[], own_bounds integer[], other_limits boolean) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN other_limits THEN own_keys <> '{}' ELSE 0 < ANY (own_bounds) END $$;

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
    AS $$ SELECT ARRAY['kind:' || kind, 'tenant:' || tenant] || coalesce(kind_keys, '{}') || own_keys $$;

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

CREATE FUNCTION public.jobs_key_tokens(of_key text, rate double precision, burst integer, tokens double precision, refilled_at timestamp with time zone, at timestamp with time zone) RETURNS double precision
    LANGUAGE plpgsql STABLE
    SET search_path TO 'public', 'pg_temp'
    AS $$
BEGIN
    RETURN jobs_bucket_tokens(rate, burst, tokens, refilled_at, at)
           - coalesce((SELECT sum(c.taken) FROM job_key_charges AS c WHERE c.key = of_key), 0);
END
$$;

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
        -- that stayed running with the same keys (a lease renewed) cancel out, and nothing is written.
        INSERT INTO job_running_tallies AS t (key, holder, running)
        SELECT d.key, pg_backend_pid(), sum(d.n)
        FROM (SELECT unnest(jobs_running_tally_keys(g.kind, g.tenant, g.running_keys)) AS key, g.n
              FROM (SELECT n.kind, n.tenant, n.running_keys, count(*) AS n
                    FROM new_rows AS n
                    WHERE n.state = 'running'
                    GROUP BY n.kind, n.tenant, n.running_keys
                    UNION ALL
                    SELECT o.kind, o.tenant, o.running_keys, -count(*)
                    FROM old_rows AS o
                    WHERE o.state = 'running'
                    GROUP BY o.kind, o.tenant, o.running_keys) AS g) AS d
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
    AS $$ SELECT ARRAY['kind:' || kind, 'tenant:' || tenant] || coalesce(running_keys[3:], '{}') $$;

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

CREATE FUNCTION public.jobs_tenant_visible(row_tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT row_tenant = coalesce(nullif(current_setting('jobs.tenant', true), ''), row_tenant) $$;

CREATE FUNCTION public.jobs_tend_running_tallies() RETURNS text[]
    LANGUAGE plpgsql
    SET search_path TO 'public', 'pg_temp'
    SET jit TO 'off'
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

CREATE INDEX jobs_dedupe_input_idx ON public.jobs USING btree (tenant, kind, input_digest, COALESCE(finished_at, 'infinity'::timestamp with time zone)) WHERE ((input_digest IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'retry_wait'::public.job_state, 'running'::public.job_state, 'succeeded'::public.job_state])));

CREATE INDEX jobs_depends_on_idx ON public.jobs USING gin (depends_on) WHERE (depends_on <> '{}'::uuid[]);

CREATE INDEX jobs_finished_idx ON public.jobs USING btree (finished_at) WHERE (state = ANY (ARRAY['succeeded'::public.job_state, 'failed'::public.job_state, 'cancelled'::public.job_state, 'superseded'::public.job_state]));

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON public.jobs USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX jobs_queue_gauge_idx ON public.jobs USING btree (state, finished_at) WHERE (state = ANY (ARRAY['blocked'::public.job_state, 'failed'::public.job_state, 'outcome_unknown'::public.job_state]));

CREATE INDEX jobs_runnable_idx ON public.jobs USING btree (kind, tenant, priority DESC, run_after, job_id) WHERE (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state]));

CREATE INDEX jobs_running_lease_idx ON public.jobs USING btree (lease_expires_at) WHERE (state = 'running'::public.job_state);

CREATE INDEX jobs_tenant_created_idx ON public.jobs USING btree (tenant, created_at DESC, job_id DESC);

CREATE INDEX jobs_tenant_queued_idx ON public.jobs USING hash (tenant) WHERE (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state]));

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

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.kind_pauses TO jobs_api;
GRANT SELECT ON TABLE public.kind_pauses TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.resource_deletions TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.resource_heads TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.schedule_fires TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.schedules TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_weights TO jobs_api;
GRANT SELECT ON TABLE public.tenant_weights TO jobs_worker;
