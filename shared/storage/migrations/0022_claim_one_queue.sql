-- The claim when limits have nothing to decide (none in force, no key held by a provider's pushback) and
-- the runnable jobs are of one kind at one priority: the usual case, one tenant's bulk import or several
-- tenants' queues of one kind. The fair order of such jobs needs no job row: a tenant's n-th next job has
-- the share (running + n) / weight, so how many of the batch each tenant gets follows from its running
-- count and its weight alone. Each tenant's share of the batch is then locked as it is read, in its queue's
-- order, skipping the rows racing claimers hold, and claimed: one pass over the rows claimed, as the FIFO
-- claim before 0017 made. A tenant with fewer runnable rows than its share leaves the rest to the others,
-- in up to three rounds.
-- The fair claim (0021, renamed jobs_claim_fair here) reads candidates without locks and locks them after:
-- every row was read three times, and claimers reading one queue at once were offered the same rows, all
-- but one reading the queue again past them. Two claimers draining one tenant spent 44 us of PostgreSQL's
-- CPU a job in the fair claim, 27 us in the FIFO claim, 28 us here.
-- Anything else goes to the fair claim, in the same statement: jobs of several kinds or priorities, limits
-- in force, held keys, and a batch holding a job that bounds itself (a submission's own limit, counted
-- under its key's lock there). Ties between tenants' shares go to the tenant whose next job is older.
ALTER FUNCTION jobs_claim(text, text[], integer, double precision) RENAME TO jobs_claim_fair;

CREATE FUNCTION jobs_claim(claim_worker text, claim_kinds text[], claim_limit integer,
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
    -- The tenants still taking part in the allocation, with their running jobs (this claim's included)
    -- and weights.
    live text[];
    running bigint[];
    weights integer[];
    shares_of text[];
    share_counts bigint[];
    locked_ids uuid[];
    locked_tenants text[];
    bounded boolean;
    claimed integer := 0;
    rounds integer := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM job_limits AS l WHERE l.max_running > 0 OR l.rate_per_second > 0)
       OR EXISTS (SELECT 1 FROM job_key_state AS s WHERE s.held_until > clock_timestamp()) THEN
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
    live := queue_tenants;
    IF cardinality(live) > 1 THEN
        SELECT array_agg(coalesce(r.n, 0) ORDER BY u.ord), array_agg(coalesce(w.weight, 1) ORDER BY u.ord)
        INTO running, weights
        FROM unnest(live) WITH ORDINALITY AS u(tenant, ord)
        LEFT JOIN (SELECT j.tenant, count(*) AS n
                   FROM jobs AS j
                   WHERE j.state = 'running' AND j.tenant = ANY (live)
                   GROUP BY j.tenant) AS r ON r.tenant = u.tenant
        LEFT JOIN tenant_weights AS w ON w.tenant = u.tenant;
    END IF;

    LOOP
        rounds := rounds + 1;
        -- Each tenant's part of the rest of the batch: the smallest shares (running + n) / weight win.
        IF cardinality(live) = 1 THEN
            shares_of := live;
            share_counts := ARRAY[claim_limit - claimed];
        ELSE
            SELECT array_agg(s.tenant), array_agg(s.n)
            INTO shares_of, share_counts
            FROM (SELECT c.tenant, count(*) AS n
                  FROM (SELECT q.tenant
                        FROM unnest(live, running, weights) AS q(tenant, running, weight)
                        JOIN unnest(queue_tenants, head_ages) AS h(tenant, age) ON h.tenant = q.tenant
                        CROSS JOIN generate_series(1, claim_limit - claimed) AS i(n)
                        ORDER BY (q.running + i.n)::float8 / q.weight, h.age, q.tenant
                        LIMIT claim_limit - claimed) AS c
                  GROUP BY c.tenant) AS s;
        END IF;

        SELECT coalesce(array_agg(l.job_id), '{}'), coalesce(array_agg(l.tenant), '{}'), coalesce(bool_or(l.bounds_itself), false)
        INTO locked_ids, locked_tenants, bounded
        FROM unnest(shares_of, share_counts) AS a(tenant, n)
        CROSS JOIN LATERAL (
            SELECT j.job_id, j.tenant, 0 < ANY (j.limit_key_bounds) AS bounds_itself
            FROM jobs AS j
            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = only_kind AND j.tenant = a.tenant
              AND j.priority = top_priority
              AND j.run_after <= clock_timestamp()
              AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
            ORDER BY j.priority DESC, j.run_after, j.job_id
            LIMIT a.n
            FOR UPDATE OF j SKIP LOCKED
        ) AS l;

        IF bounded THEN
            -- The rows locked here are this transaction's: the fair claim can take them.
            RETURN QUERY SELECT f.* FROM jobs_claim_fair(claim_worker, claim_kinds, claim_limit - claimed,
                                                         claim_lease_seconds) AS f;
            RETURN;
        END IF;

        IF cardinality(locked_ids) > 0 THEN
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
            WHERE j.job_id = ANY (locked_ids)
            RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
                      j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at), j.started_at,
                      j.traceparent, j.tracestate;
            claimed := claimed + cardinality(locked_ids);
        END IF;

        EXIT WHEN claimed >= claim_limit OR rounds >= 3;
        -- A tenant that got less than its part has no more rows to claim now (or racing claimers hold
        -- them); the others (those given no part too) share what is left, their running counts raised by
        -- what they got.
        SELECT array_agg(q.tenant ORDER BY q.ord), array_agg(q.running + g.n ORDER BY q.ord),
               array_agg(q.weight ORDER BY q.ord)
        INTO live, running, weights
        FROM unnest(live, coalesce(running, array_fill(0::bigint, ARRAY[cardinality(live)])),
                    coalesce(weights, array_fill(1, ARRAY[cardinality(live)])))
             WITH ORDINALITY AS q(tenant, running, weight, ord)
        LEFT JOIN unnest(shares_of, share_counts) AS a(tenant, n) ON a.tenant = q.tenant
        CROSS JOIN LATERAL (SELECT count(*) AS n FROM unnest(locked_tenants) AS t(tenant)
                            WHERE t.tenant = q.tenant) AS g
        WHERE g.n >= coalesce(a.n, 0);
        EXIT WHEN live IS NULL;
    END LOOP;
END
$$;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_claim(text, text[], integer, double precision) OWNER TO jobs_migrator;
    END IF;
END $$;
