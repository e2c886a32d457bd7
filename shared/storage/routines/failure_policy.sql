-- The failure policy: the next state of a failed attempt, and the backoff before the next one.
-- after: 0033_claim_statements_merged

-- The longest wait before the attempt after `attempt`: base × 2^(attempt−1), at most cap. Attempt numbers
-- grow without limit under manual retries and 2^1024 overflows a double, so the doubling is never computed
-- past the point where it reaches the cap: found on logarithms (cap / base overflows when base is tiny),
-- and in any case at 2^1023, which every base the registry accepts has reached the cap long before.
CREATE OR REPLACE FUNCTION jobs_retry_backoff_ceiling(attempt integer, base_seconds double precision,
                                           cap_seconds double precision)
    RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE
            WHEN base_seconds <= 0 OR cap_seconds <= 0 THEN 0
            WHEN greatest(attempt - 1, 0) >= least(1023, (ln(cap_seconds) - ln(base_seconds)) / ln(2))
                THEN cap_seconds
            ELSE base_seconds * power(2::double precision, greatest(attempt - 1, 0))
        END
    $$;

-- The wait before the next attempt: full jitter, uniform in [0, ceiling], so that jobs which failed
-- together do not come back together. Neither function is STRICT: the planner inlines a non-strict SQL
-- function into the calling statement instead of calling it for every row.
CREATE OR REPLACE FUNCTION jobs_retry_backoff(attempt integer, base_seconds double precision, cap_seconds double precision)
    RETURNS interval
    LANGUAGE sql VOLATILE PARALLEL RESTRICTED
    AS $$ SELECT make_interval(secs => random() * jobs_retry_backoff_ceiling(attempt, base_seconds, cap_seconds)) $$;

-- The state after an attempt ended without success. `category` is how it ended (an expired lease or an
-- interrupted attempt is retryable, or outcome_unknown after an unconfirmed external call); `attempts`
-- counts the attempts used, this one included; `retry_at` is when the next attempt could start;
-- `waiting_state` is where that attempt waits (RETRY_WAIT after a backoff, PENDING when handed back).
-- Always exactly one row. Declared as a table so that the planner inlines it into a statement's FROM
-- clause; a function returning a record would be called for every row.
CREATE OR REPLACE FUNCTION jobs_next_state_after_failure(
    category error_category, cancel_requested boolean, attempts integer, max_attempts integer,
    deadline timestamptz, retry_at timestamptz, waiting_state job_state)
    RETURNS TABLE (next_state job_state, cause failure_cause)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 1
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
