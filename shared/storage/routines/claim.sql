-- The claim: which runnable jobs a worker takes, fairly across tenants and within the limits on their keys.
-- after: 0036_parked_jobs
--
-- jobs_claim runs these stages, each a routine that takes the claim's state (jobs_claim_state) and gives
-- it back; docs/SCHEDULING.md says why the order is what it is.
--   jobs_claim_unpark   parked jobs whose key has room again go back into the walk (only when some are parked;
--                       never those parked on '', which wait for their turn in a sequence: routines/sequences.sql)
--   jobs_claim_start    the heads of the tenants' queues (jobs_claim_heads), the tenants' running jobs and
--                       weights, the keys under a limit that the batch's kinds and tenants carry
--   then, round by round (at most six):
--   jobs_claim_round    each tenant's part of the rest (jobs_claim_parts), its rows locked in its queue's
--                       order, the rooms under the limits (jobs_claim_rooms, in the first round with keys to
--                       lock) and the rows that fit them (jobs_claim_fit)
--   (jobs_claim)        the chosen rows claimed, in the statement that returns them to the caller
--   jobs_claim_next     what each key and tenant took; who takes part in the next round, at which priority
--   jobs_claim_finish   the tokens charged to rate-limited keys, and the rows found without room parked
--
-- The state (jobs_claim_state):
--   batch, claimed, rounds, done    jobs asked for and claimed so far; rounds run; whether another is due
--   priority                        the priority this round claims at
--   pair_kinds, pair_tenants, pair_priorities
--                                   the queues: each (kind, tenant) with a job to claim now, its priority
--   declared                        per kind that declares keys, those keys
--   tenants, tenant_running, tenant_weights, tenant_ages, tenant_live
--                                   every tenant with a queue: its running jobs (this claim's counted in),
--                                   its weight, its next job's age, and whether it takes part in this round
--   limited, keys_locked            the keys whose limits bound the claim, in the order their locks are
--                                   taken; whether they are locked
--   counted_at, parts, key_running  when the rooms were counted under the locks; per key with an operator's
--                                   limit or a hold, the part of its room the claim may still take; per key,
--                                   its running jobs as counted then (a submission's own bound needs them)
--   shared_keys, charge_shared      the keys locked shared; whether one of those is rate-limited
--   shares_of, share_counts         this round's parts
--   locked_ids, locked_tenants, locked_kinds, locked_keyed
--                                   this round's locked rows, each tenant's in its queue's order; whether
--                                   any carries keys of its own
--   chosen_ids, chosen_tenants, chosen_kinds
--                                   the locked rows that fit, claimed by this round
--   taken                           per limited key, the jobs the claim took under it
--   park_ids, park_keys             rows found without room under a key of their own, and that key

-- The claim. Its settings keep every stage's plans cheap and right, for every stage runs under them:
-- - one generic plan per session instead of a plan per call, whose planning cost more than a small batch;
-- - no sorts or sequential scans where an index will do: a plan made on statistics that lag the queue (a
--   burst between two autoanalyze runs, a new tenant, a plan made while the table was nearly empty) read a
--   tenant's whole queue and sorted it; the rows come in order from jobs_runnable_idx and the scan stops at
--   the batch. The sorts it cannot do without (the fair order over the locked rows) are made. Incremental
--   sorts too: over jobs_tenant_queued_idx, a B-tree on `tenant` alone since 0040, one would look cheap to
--   such a plan and read a tenant's whole queue for its first job;
-- - no just-in-time compilation: estimates on a long backlog could cross its threshold, 40 ms a claim.
CREATE OR REPLACE FUNCTION jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer,
                                      claim_lease_seconds double precision)
    RETURNS TABLE (job_id uuid, tenant text, kind text, payload bytea, attempts integer, max_attempts integer,
                   fencing_token bigint, lease_expires_at timestamptz, created_at timestamptz,
                   queued_since timestamptz, claimed_at timestamptz, traceparent text, tracestate text)
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    SET plan_cache_mode = force_generic_plan
    SET enable_sort = off
    SET enable_incremental_sort = off
    SET enable_seqscan = off
    SET jit = off
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

-- Parked jobs back into the walk, for every key they wait for that has room now: as many of each key's as
-- its room holds (at most four batches), first in its queue's order. The room is judged without the key's
-- lock, as a hint: a job taken back that the room under the lock turns away is parked again. The rooms are
-- read first, and jobs updated only when one has room: while every key is full or held, which is most of
-- the time they wait, a claim reads one row per key and writes nothing (an UPDATE of no rows would still
-- fire the table's statement triggers).
CREATE OR REPLACE FUNCTION jobs_claim_unpark(claim_limit integer) RETURNS void
    LANGUAGE plpgsql VOLATILE
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

-- The queues with a job to claim now: per kind of the claim that is not paused, each tenant with runnable
-- rows (one index descent per tenant, however long its queue), and the priority and age of its next job.
CREATE OR REPLACE FUNCTION jobs_claim_heads(claim_kinds text[])
    RETURNS TABLE (kind text, tenant text, priority integer, run_after timestamptz)
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

-- The claim's state before its first round: the queues, their tenants, and the keys under a limit that the
-- batch's kinds and tenants carry (a submission's own keys join them from the rows locked).
CREATE OR REPLACE FUNCTION jobs_claim_start(claim_kinds text[], claim_limit integer) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- The queues again, after parked jobs whose key has room went back into the walk, and without a kind whose
-- key or a key it declares is held, or a tenant whose key is held: nothing of theirs is read.
CREATE OR REPLACE FUNCTION jobs_claim_requeue(claim_kinds text[], claim_limit integer, holds boolean, parked boolean)
    RETURNS TABLE (kinds text[], tenants text[], priorities integer[], ages timestamptz[], priority integer)
    LANGUAGE plpgsql VOLATILE
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

-- The claim's state before its first round when the queues are of several kinds: per tenant the oldest next
-- job of its queues at its highest priority, its running jobs and weight; the keys the kinds declare; the
-- limits in force on those, the kinds' and the tenants' keys.
CREATE OR REPLACE FUNCTION jobs_claim_start_kinds(s jobs_claim_state, pair_ages timestamptz[])
    RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- One round: each taking tenant's part of the rest of the batch at this round's priority, its rows locked
-- (jobs_claim_lock_rows), the rooms under the limits, counted once, and the locked rows that fit them.
CREATE OR REPLACE FUNCTION jobs_claim_round(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- The row locks of a round whose parts are of several tenants and one kind: each part locked as it is read,
-- in the tenant's queue order, past the rows racing claimers hold; sorted once into the parts' order, which
-- the aggregates keep (an ORDER BY in each would sort the rows once per array).
CREATE OR REPLACE FUNCTION jobs_claim_lock_parts(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- The row locks of a round whose tenants have queues of several kinds: each tenant's part locked as it is
-- read, in each of its queues' order, past the rows racing claimers hold (the fair order then picks among
-- them). Rows with keys of their own that no lock covers are passed over once the keys are locked: a later
-- round's keys would be locked out of the order that keeps claimers from deadlocking.
CREATE OR REPLACE FUNCTION jobs_claim_lock_rows(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- The locked rows that fit the rooms (jobs_claim_fit), and those to park.
CREATE OR REPLACE FUNCTION jobs_claim_choose(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- Each taking tenant's part of `cap` jobs: the `cap` smallest shares (running + n) / weight, ties to the
-- tenant whose next job is older. No part reaches past the level at which every tenant, filled up to it,
-- would hold the rest with one job each to spare, (cap + running + tenants) / weights: so each tenant's
-- candidates stop there (one more for floating-point rounding), and the parts come from about cap + 2 x
-- tenants rows instead of tenants x cap. Not when a tenant's own room caps it: a capped tenant falls short
-- of the level, and the others rise past it.
CREATE OR REPLACE FUNCTION jobs_claim_parts(tenants text[], running bigint[], weights integer[],
                                            ages timestamptz[], live boolean[], parts jsonb, cap integer)
    RETURNS TABLE (tenant text, n bigint)
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

-- The rooms under the limits, counted once per claim under the keys' locks: the keys whose limits the
-- batch's kinds and tenants carry, and the keys of their own that bound the locked rows (a submission's own
-- bound, an operator's limit, a hold). The locks are taken in the order every claim takes them (by hash),
-- after the row locks, so that no claim waits for a key while holding another out of that order. A key
-- with room to spare is locked shared: no more than `max_connections` claims run at once, so claims that
-- each take at most their count of the room divided by that cannot together take more than the room, and
-- need not wait for each other. Which keys have it is judged first without the locks (the session's last
-- count under them, when it is younger than a second and covers every key, else a floor of the room); a
-- key near its bound is locked alone. Then the rooms are counted in a statement begun after the locks,
-- whose snapshot holds what racing claimers started: READ COMMITTED only.
CREATE OR REPLACE FUNCTION jobs_claim_rooms(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- The locked rows that fit the rooms, in the fair order (a tenant's n-th row goes after every tenant whose
-- running jobs and earlier rows weigh less, ties to the older queue), judged from the finest keys to the
-- widest: each row's keys of its own, its tenant's part, its kind's, then the keys its kind declares, which
-- kinds share. A count at each step takes in only the rows the steps before let through, so a key never
-- lets more through than its room; a row turned away by a wider key may have used a place under a finer
-- one, which costs that row's followers a claim, never a start too many. Rows turned away by a key of their
-- own whose whole room is used (not a part of it held shared) come back with that key, to be parked.
CREATE OR REPLACE FUNCTION jobs_claim_fit(s jobs_claim_state)
    RETURNS TABLE (job_id uuid, tenant text, kind text, park_on text)
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

-- Between two rounds: what the last one took under each limited key (the rooms left), and who takes part in
-- the next. A tenant that got less than its part has no more rows to claim now (racing claimers hold them,
-- or they wait for a key of their own), and one whose own room is used up takes no more; the others, those
-- given no part too, share what is left, their running counts raised by what they got. Once no tenant has
-- more at this priority, every tenant with room goes on at the next priority down, if any.
CREATE OR REPLACE FUNCTION jobs_claim_next(s jobs_claim_state) RETURNS jobs_claim_state
    LANGUAGE plpgsql VOLATILE
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

-- After the last round: the tokens the claim took from each rate-limited key, by the clock its room was
-- counted with, and the rows found without room under a key of their own parked behind it. A key locked
-- shared is charged in a row of this backend's own, which no other claim writes: claims sharing a key's
-- lock would otherwise charge its one row one after another, each waiting for the last to commit. A key
-- locked alone is charged in its bucket, and the charges made under shared locks are folded in.
CREATE OR REPLACE FUNCTION jobs_claim_finish(s jobs_claim_state) RETURNS void
    LANGUAGE plpgsql VOLATILE
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

-- A floor of the room under each of `keys`' limits at `at`, without their locks: the running jobs under each read
-- from the tallies in the calling statement's snapshot. It judges only whether a key is locked shared.
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

-- What a round's claimed rows took under each of `counted`: every claimed job holds its kind's and its
-- tenant's keys, the keys its kind declares, and its own.
CREATE OR REPLACE FUNCTION jobs_claim_took(s jobs_claim_state, counted text[]) RETURNS jsonb
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

-- `counts` with `took` added key by key, times `sign`; keys only in `took` join it when adding.
CREATE OR REPLACE FUNCTION jobs_claim_add(counts jsonb, took jsonb, sign integer) RETURNS jsonb
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

-- The claim's kinds less those whose own key, or a key they declare, is held by a pushback.
CREATE OR REPLACE FUNCTION jobs_claim_kinds_not_held(claim_kinds text[]) RETURNS text[]
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

-- `limited` with the keys of their own that bound any of the rows `locked`: a submission's own bound, an
-- operator's limit, a hold; in the order their locks are taken.
CREATE OR REPLACE FUNCTION jobs_claim_with_own_keys(limited text[], locked uuid[]) RETURNS text[]
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

-- Per queue, whether its next job is of `top` priority.
CREATE OR REPLACE FUNCTION jobs_claim_at_priority(priorities integer[], top integer) RETURNS boolean[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY(SELECT p.priority = top FROM unnest(priorities) AS p(priority)) $$;
