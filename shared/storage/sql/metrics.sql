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
        SELECT tenant, kind, state, run_after FROM jobs WHERE state IN ('pending', 'retry_wait')
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
