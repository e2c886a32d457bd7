-- The claim: which runnable jobs a worker takes, fairly across tenants and within the limits on their keys.
-- after: 0033_claim_statements_merged

-- The claim of one kind at one priority, where most claims are: each tenant's part of the batch by fair
-- share, locked as read, fitted under the rooms of the limits on the kind's and tenants' keys, claimed and
-- charged. Anything else (held keys, several kinds or priorities, jobs that bound themselves or carry keys
-- some other limit binds) goes to jobs_claim_fair.
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

-- The general claim: candidates read without locks, fairly across tenants and past the keys nothing may
-- start under, read again past the rows that racing claimers hold, and jobs_claim_admit deciding. Its
-- settings keep the plan cheap and right:
-- - one generic plan per session instead of a plan per call: as a statement of its own, its parameters
--   made PostgreSQL plan it afresh at every claim, 0.7 ms, more than running it for a small batch;
-- - no sorts or sequential scans where an index will do: a plan made on statistics that lag the queue (a
--   burst lands between two autoanalyze runs, a tenant is new, or the plan was made while the table was
--   nearly empty) read a tenant's whole queue through jobs_tenant_queued_idx and sorted it, 5,850 rows for
--   19 candidates, at every claim; the candidates now come in order from jobs_runnable_idx and the scan
--   stops at the batch. The sorts it cannot do without (the fair order over the candidates) are made;
-- - just-in-time compilation is off: estimates on a long backlog could cross its threshold, 40 ms a claim.
-- jobs_claim_admit plans per call (its batches range from one row to thousands), whatever the caller says.
CREATE OR REPLACE FUNCTION jobs_claim_fair(claim_worker text, claim_kinds text[], claim_limit integer,
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

-- Admission: the candidates' keys read in one pass; when a bound could be reached within the batch, each
-- candidate decided in turn under the keys' locks, the running jobs under them read from the tallies;
-- then one statement locks, claims and charges the admitted rows.
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

-- The named jobs in the order given, with every key each carries (kind keys from the map given).
CREATE OR REPLACE FUNCTION jobs_claim_candidates(candidate_ids uuid[], kind_keys jsonb)
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

-- Whether a runnable job must be admitted by the fair claim: it bounds itself (a submission's `@N`), or,
-- while limits are in force on keys other than its kind's and its tenant's, it carries a submission key.
CREATE OR REPLACE FUNCTION jobs_claim_needs_admission(own_keys text[], own_bounds integer[], other_limits boolean)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN other_limits THEN own_keys <> '{}' ELSE 0 < ANY (own_bounds) END $$;

-- The room under each of `keys`' limits at `at`, the running jobs under each read from the tallies in the
-- calling statement's snapshot.
CREATE OR REPLACE FUNCTION jobs_claim_rooms_at(keys text[], at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
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
