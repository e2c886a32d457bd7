-- Statements behind the API's queue gauges. Each block: a name line, a purpose line, one statement.

-- name: metrics_exporter_lock_try
-- Takes the session-level lock that makes this connection's process the one exporter of the queue gauges.
SELECT pg_try_advisory_lock(%(lock_key)s) AS acquired;

-- name: metrics_queue_snapshot
-- Open jobs (and recent failures) per tenant, kind and state, with the wait of the oldest runnable one; each branch reads one partial index, so finished history costs nothing. The first column proves, in the same statement, that this session still holds the exporter lock; without it no counts come back.
WITH exporter AS (
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted  -- our backend, so our database
          AND classid = (%(lock_key)s::bigint >> 32)::oid
          AND objid = (%(lock_key)s::bigint & 4294967295)::oid
          AND objsubid = 1
    ) AS lock_held
), counts AS (
    SELECT tenant, kind, state::text AS state, count(*) AS jobs,
           extract(epoch FROM statement_timestamp() - min(run_after)
                   FILTER (WHERE state IN ('pending', 'retry_wait') AND run_after <= statement_timestamp()))::float8
               AS oldest_wait_seconds
    FROM (
        -- Waiting jobs in two parts, one per partial index: those a claim walks and those parked behind a
        -- key without room (migration 0036) or waiting for their turn in a sequence (parked on '', 0041),
        -- which wait by design, as blocked jobs do: they count as pending, not in the oldest wait.
        SELECT tenant, kind, state, run_after FROM jobs WHERE state IN ('pending', 'retry_wait') AND parked_on IS NULL
        UNION ALL
        SELECT tenant, kind, state, CASE WHEN parked_on = '' THEN 'infinity' ELSE run_after END FROM jobs
        WHERE state IN ('pending', 'retry_wait') AND parked_on IS NOT NULL
        UNION ALL
        SELECT tenant, kind, state, run_after FROM jobs WHERE state = 'running'
        UNION ALL
        SELECT tenant, kind, state, run_after FROM jobs WHERE state IN ('blocked', 'outcome_unknown')
        UNION ALL
        SELECT tenant, kind, state, run_after FROM jobs
        WHERE state = 'failed'
          AND finished_at >= statement_timestamp() - make_interval(secs => %(failed_window_seconds)s)
    ) AS open_jobs
    GROUP BY tenant, kind, state
)
SELECT e.lock_held, c.tenant, c.kind, c.state, c.jobs, c.oldest_wait_seconds
FROM exporter AS e
LEFT JOIN counts AS c ON e.lock_held;

-- name: metrics_limit_snapshot
-- Per key with an operator's limit or a hold: its bounds, the jobs running with it, the runnable jobs it holds back now, and whether it has room; only with the exporter lock's proof read in the same statement.
WITH exporter AS (
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND classid = (%(lock_key)s::bigint >> 32)::oid
          AND objid = (%(lock_key)s::bigint & 4294967295)::oid
          AND objsubid = 1
    ) AS lock_held
), keys AS (
    SELECT key FROM job_limits WHERE max_running > 0 OR rate_per_second > 0
    UNION
    SELECT key FROM job_key_state WHERE held_until > statement_timestamp()
), running AS (
    SELECT rk AS key, count(*) AS n
    FROM jobs AS j, unnest(j.running_keys) AS rk
    WHERE j.state = 'running' AND rk IN (SELECT key FROM keys)
    GROUP BY rk
), runnable AS (
    SELECT tenant, kind, count(*) AS n
    FROM jobs
    WHERE state IN ('pending', 'retry_wait') AND run_after <= statement_timestamp()
    GROUP BY tenant, kind
), waiting AS (
    -- Implicit and declared keys from the counts per tenant and kind; a tenant's own keys from its rows.
    SELECT k.key, sum(r.n) AS n
    FROM keys AS k
    JOIN runnable AS r
      ON k.key = jobs_kind_key(r.kind) OR k.key = jobs_tenant_key(r.tenant)
         OR EXISTS (SELECT 1 FROM job_kinds AS jk WHERE jk.kind = r.kind AND k.key = ANY (jk.limit_keys))
    GROUP BY k.key
    UNION ALL
    SELECT k.key, count(*)
    FROM keys AS k
    JOIN jobs AS j
      ON j.state IN ('pending', 'retry_wait') AND j.run_after <= statement_timestamp()
     AND j.tenant = jobs_key_tenant(k.key) AND k.key = ANY (j.limit_keys)
    GROUP BY k.key
), per_key AS (
    SELECT k.key, coalesce(l.max_running, 0) AS max_running, coalesce(r.n, 0) AS running,
           coalesce((SELECT sum(w.n) FROM waiting AS w WHERE w.key = k.key), 0)::bigint AS waiting,
           coalesce(s.held_until > statement_timestamp(), false)
           OR (l.max_running > 0 AND coalesce(r.n, 0) >= l.max_running)
           OR (l.rate_per_second > 0
               AND jobs_key_tokens(k.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, statement_timestamp()) < 1)
               AS saturated
    FROM keys AS k
    LEFT JOIN job_limits AS l ON l.key = k.key
    LEFT JOIN job_key_state AS s ON s.key = k.key
    LEFT JOIN running AS r ON r.key = k.key
)
SELECT e.lock_held, p.key, p.max_running, p.running, p.waiting, coalesce(p.saturated, false) AS saturated
FROM exporter AS e
LEFT JOIN per_key AS p ON e.lock_held;

-- name: metrics_kind_pauses
-- The kinds an operator paused, so that alerts on waiting work can tell a pause from a stall; only with the exporter lock's proof read in the same statement.
WITH exporter AS (
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND classid = (%(lock_key)s::bigint >> 32)::oid
          AND objid = (%(lock_key)s::bigint & 4294967295)::oid
          AND objsubid = 1
    ) AS lock_held
)
SELECT e.lock_held, p.kind
FROM exporter AS e
LEFT JOIN kind_pauses AS p ON e.lock_held
ORDER BY p.kind;

-- name: metrics_sequences_halted
-- Per tenant, its sequences halted by a FAILED or OUTCOME_UNKNOWN job (waiting for a retry or a cancel); only with the exporter lock's proof read in the same statement.
WITH exporter AS (
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND classid = (%(lock_key)s::bigint >> 32)::oid
          AND objid = (%(lock_key)s::bigint & 4294967295)::oid
          AND objsubid = 1
    ) AS lock_held
), halted AS (
    SELECT tenant, count(DISTINCT sequence_key) AS sequences
    FROM jobs
    WHERE sequence_key IS NOT NULL AND state IN ('failed', 'outcome_unknown')
    GROUP BY tenant
)
SELECT e.lock_held, h.tenant, h.sequences
FROM exporter AS e
LEFT JOIN halted AS h ON e.lock_held;
