-- The claim when there is nothing for fair shares or limits to decide: one tenant's queue of one kind, no
-- limit in force and no key held by a provider's pushback. The fair order of one tenant's jobs is its own
-- order (priority, then age), so the claim locks them as it reads them, in that order, skipping the rows
-- racing claimers hold: one pass, as the FIFO claim before 0017 made. The fair claim (0021, renamed
-- jobs_claim_fair here) reads candidates without locks and locks them after: two claimers reading one
-- queue at once were offered the same rows, and all but one read the queue again past them. Two claimers
-- draining one tenant spent 44 us of PostgreSQL's CPU a job in the fair claim, 27 us in the FIFO claim.
-- A batch holding a job that bounds itself (a submission's own limit), and a claim that found no row it
-- could lock, go to the fair claim in the same statement: every decision a key or a share makes is
-- still made there.
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
    only_kind text;
    only_tenant text;
    declared text[];
    claimed integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job_limits AS l WHERE l.max_running > 0 OR l.rate_per_second > 0)
       AND NOT EXISTS (SELECT 1 FROM job_key_state AS s WHERE s.held_until > clock_timestamp()) THEN
        -- The queues of the open kinds: each kind's first tenant with runnable rows, and whether it has a
        -- second (two index descents per kind, however long the queues).
        SELECT min(q.kind), min(q.tenant)
        INTO only_kind, only_tenant
        FROM (SELECT k.kind, f.tenant,
                     EXISTS (SELECT 1 FROM jobs AS j
                             WHERE j.state IN ('pending', 'retry_wait') AND j.kind = k.kind
                               AND j.tenant > f.tenant) AS others
              FROM unnest(claim_kinds) AS k(kind)
              CROSS JOIN LATERAL (SELECT j.tenant FROM jobs AS j
                                  WHERE j.state IN ('pending', 'retry_wait') AND j.kind = k.kind
                                  ORDER BY j.tenant LIMIT 1) AS f
              WHERE NOT EXISTS (SELECT 1 FROM kind_pauses AS p WHERE p.kind = k.kind)) AS q
        HAVING count(*) = 1 AND NOT bool_or(q.others);
    END IF;

    IF only_kind IS NOT NULL THEN
        SELECT jk.limit_keys INTO declared
        FROM job_kinds AS jk
        WHERE jk.kind = only_kind AND jk.limit_keys <> '{}';
        RETURN QUERY
        WITH locked AS (
            SELECT j.job_id, 0 < ANY (j.limit_key_bounds) AS bounds_itself
            FROM jobs AS j
            WHERE j.state IN ('pending', 'retry_wait') AND j.kind = only_kind AND j.tenant = only_tenant
              AND j.run_after <= clock_timestamp()
              AND (j.deadline IS NULL OR j.deadline > clock_timestamp())
            ORDER BY j.priority DESC, j.run_after, j.job_id
            LIMIT claim_limit
            FOR UPDATE OF j SKIP LOCKED
        )
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
        WHERE j.job_id = ANY (ARRAY(SELECT l.job_id FROM locked AS l))
          -- A submission's own bound is counted under its key's lock: a batch holding such a job is left
          -- whole to the fair claim (the rows locked here are this transaction's, so it can take them).
          AND NOT EXISTS (SELECT 1 FROM locked AS b WHERE b.bounds_itself)
        RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
                  j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at), j.started_at,
                  j.traceparent, j.tracestate;
        GET DIAGNOSTICS claimed = ROW_COUNT;
        -- A batch short of the limit took every unlocked runnable row of the only queue.
        IF claimed > 0 THEN
            RETURN;
        END IF;
    END IF;

    RETURN QUERY SELECT f.* FROM jobs_claim_fair(claim_worker, claim_kinds, claim_limit, claim_lease_seconds) AS f;
END
$$;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_claim(text, text[], integer, double precision) OWNER TO jobs_migrator;
    END IF;
END $$;
