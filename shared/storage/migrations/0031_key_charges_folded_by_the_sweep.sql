-- The charges claims make under a key's shared lock (0029) are folded into its bucket by a claim that
-- locks the key alone, and a claim does that only when the key's tokens run short. A key whose burst
-- dwarfs its use never ran short: its charges kept a row for every backend that charged it since (a
-- pooled connection that is replaced is a new backend), and every claim under the key, every GetJob
-- reason and every scrape of the saturation gauge summed all of them. Now the workers' sweep folds every
-- charged key at each sweep interval, one key per transaction (jobs_fold_key_charges). It locks the key
-- alone, which waits for the claims holding it shared to commit and holds new ones off for the moment of
-- the fold, sets the bucket to the tokens it had as read at that moment (the bucket less the charges) and
-- deletes the charges: the tokens a claim may take are the same before and after. Charges to a key no
-- longer rate-limited are deleted, since nothing reads them.
CREATE FUNCTION jobs_fold_key_charges(of_key text) RETURNS bigint
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
REVOKE ALL ON FUNCTION jobs_fold_key_charges(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_fold_key_charges(text) TO jobs_worker;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_fold_key_charges(text) OWNER TO jobs_migrator;
    END IF;
END $$;
