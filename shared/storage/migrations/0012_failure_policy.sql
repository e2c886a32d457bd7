-- What follows a failed attempt, decided in one place for every statement that ends an attempt without
-- success (job_fail, job_rescue_expired and job_release in sql/jobs.sql), the way one retry policy decides
-- it in River's reportError. The inputs are the row's own limits (max_attempts, deadline and the backoff
-- the API copied from the kind's registration at submission), so every replica decides alike.

-- The longest wait before the attempt after `attempt`: base × 2^(attempt−1), at most cap. Attempt numbers
-- grow without limit under manual retries and 2^1024 overflows a double, so the doubling is never computed
-- past the point where it reaches the cap: found on logarithms (cap / base overflows when base is tiny),
-- and in any case at 2^1023, which every base the registry accepts has reached the cap long before.
CREATE FUNCTION jobs_retry_backoff_ceiling(attempt integer, base_seconds double precision,
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
CREATE FUNCTION jobs_retry_backoff(attempt integer, base_seconds double precision, cap_seconds double precision)
    RETURNS interval
    LANGUAGE sql VOLATILE PARALLEL RESTRICTED
    AS $$ SELECT make_interval(secs => random() * jobs_retry_backoff_ceiling(attempt, base_seconds, cap_seconds)) $$;

-- Why an attempt's end leads where it does; the statements phrase their messages from it.
CREATE TYPE failure_cause AS ENUM (
    'cancel_requested',   -- someone asked to stop: CANCELLED, whatever the failure
    'outcome_unknown',    -- an external effect may have happened: OUTCOME_UNKNOWN, a person decides
    'permanent',          -- the handler said it will fail the same way every time: FAILED
    'attempts_exhausted', -- that was the last attempt allowed: FAILED
    'deadline',           -- the next attempt could not start before the total deadline: FAILED
    'retry'               -- another attempt follows, from `waiting_state`
);

-- The state after an attempt ended without success. `category` is how it ended (an expired lease or an
-- interrupted attempt is retryable, or outcome_unknown after an unconfirmed external call); `attempts`
-- counts the attempts used, this one included; `retry_at` is when the next attempt could start;
-- `waiting_state` is where that attempt waits (RETRY_WAIT after a backoff, PENDING when handed back).
-- Always exactly one row. Declared as a table so that the planner inlines it into a statement's FROM
-- clause; a function returning a record would be called for every row.
CREATE FUNCTION jobs_next_state_after_failure(
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

-- Owned like the rest of the schema (see 0007), so that a later migration run as jobs_migrator can
-- replace them.
DO $$
BEGIN
    IF NOT pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        RETURN;
    END IF;
    ALTER TYPE failure_cause OWNER TO jobs_migrator;
    ALTER FUNCTION jobs_retry_backoff_ceiling(integer, double precision, double precision) OWNER TO jobs_migrator;
    ALTER FUNCTION jobs_retry_backoff(integer, double precision, double precision) OWNER TO jobs_migrator;
    ALTER FUNCTION jobs_next_state_after_failure(error_category, boolean, integer, integer, timestamptz,
                                                 timestamptz, job_state) OWNER TO jobs_migrator;
END $$;
