-- Statements behind the operator console: reads across every tenant (run in a transaction without a
-- tenant scope, for principals with an admin role) that the AdminService's admin.sql has no need of.
-- The console's search and its changes go through the AdminService's use-cases.

-- name: operator_queue_overview
-- Open jobs (and recent failures) per kind and tenant with the oldest runnable wait, whether the kind is paused, and whether a running limit on its kind or tenant key is full; each branch reads one partial index.
WITH open_jobs AS (
    SELECT tenant, kind, state, run_after FROM jobs WHERE state IN ('pending', 'retry_wait')
    UNION ALL
    SELECT tenant, kind, state, run_after FROM jobs WHERE state = 'running'
    UNION ALL
    SELECT tenant, kind, state, run_after FROM jobs WHERE state IN ('blocked', 'outcome_unknown')
    UNION ALL
    SELECT tenant, kind, state, run_after FROM jobs
    WHERE state = 'failed'
      AND finished_at >= statement_timestamp() - make_interval(secs => %(failed_window_seconds)s)
), counts AS (
    SELECT tenant, kind,
           count(*) FILTER (WHERE state = 'pending') AS pending,
           count(*) FILTER (WHERE state = 'retry_wait') AS retry_wait,
           count(*) FILTER (WHERE state = 'blocked') AS blocked,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'outcome_unknown') AS outcome_unknown,
           count(*) FILTER (WHERE state = 'failed') AS failed_recently,
           extract(epoch FROM statement_timestamp() - min(run_after)
                   FILTER (WHERE state IN ('pending', 'retry_wait') AND run_after <= statement_timestamp()))::float8
               AS oldest_wait_seconds
    FROM open_jobs
    GROUP BY tenant, kind
), running_by_kind AS (
    SELECT kind, sum(running) AS running FROM counts GROUP BY kind
), running_by_tenant AS (
    SELECT tenant, sum(running) AS running FROM counts GROUP BY tenant
)
SELECT c.tenant, c.kind, c.pending, c.retry_wait, c.blocked, c.running, c.outcome_unknown, c.failed_recently,
       c.oldest_wait_seconds,
       p.kind IS NOT NULL AS paused,
       coalesce(p.reason, '') AS pause_reason,
       c.pending > 0 AND EXISTS (
           SELECT 1 FROM job_limits AS l
           WHERE l.max_running > 0
             AND ((l.key = jobs_kind_key(c.kind) AND l.max_running <= rk.running)
                  OR (l.key = jobs_tenant_key(c.tenant) AND l.max_running <= rt.running))
       ) AS throttled
FROM counts AS c
JOIN running_by_kind AS rk ON rk.kind = c.kind
JOIN running_by_tenant AS rt ON rt.tenant = c.tenant
LEFT JOIN kind_pauses AS p ON p.kind = c.kind
ORDER BY c.kind, c.tenant;

-- name: operator_job_get
-- One job of any tenant with the start of its payload and of its result, and whether retrying it risks a duplicate effect (as job_lock_for_retry decides, without the lock).
SELECT j.job_id, j.tenant, j.kind, j.state, j.attempts, j.max_attempts, j.priority, j.created_at, j.run_after,
       j.started_at, j.finished_at, j.deadline, j.last_error_category, j.last_error_message, j.cancel_requested,
       j.resource_key, j.resource_version, j.sequence, j.fencing_token, j.idempotency_key, j.depends_on, j.labels,
       j.sequence_key, j.singleton_key, j.debounce_key,
       j.parent_job_id, substring(j.payload FROM 1 FOR %(preview_bytes)s) AS payload_head, octet_length(j.payload) AS payload_bytes,
       substring(r.payload FROM 1 FOR %(preview_bytes)s) AS result_head, octet_length(r.payload) AS result_bytes,
       j.lease_owner, j.lease_expires_at,
       j.state = 'outcome_unknown'
       OR ((j.last_error_category = 'outcome_unknown'
            OR EXISTS (SELECT 1 FROM job_receipts AS rc
                       WHERE rc.job_id = j.job_id AND rc.attempt = j.attempts AND rc.confirmed_at IS NULL))
           AND j.attempts > coalesce(j.duplicate_risk_accepted_attempt, -1)) AS duplicate_risk
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.job_id = %(job_id)s::uuid;

-- name: operator_job_dependencies
-- The jobs one job depends on (at most a submission's 100), with their states.
SELECT j.job_id, j.kind, j.state, true AS is_dependency
FROM jobs AS j
WHERE j.job_id = ANY (%(depends_on)s::uuid[])
ORDER BY j.created_at, j.job_id;

-- name: operator_job_dependents_page
-- A page of the jobs that depend on one job, in job id order after the given one: a job may have tens of thousands.
SELECT j.job_id, j.kind, j.state, false AS is_dependency
FROM jobs AS j
WHERE j.depends_on @> ARRAY[%(job_id)s::uuid] AND j.depends_on <> '{}'
  AND (%(after_job_id)s::uuid IS NULL OR j.job_id > %(after_job_id)s::uuid)
ORDER BY j.job_id
LIMIT %(limit)s;

-- name: operator_job_children_page
-- A page of the jobs one job spawned, in job id order after the given one (jobs_parent_idx finds them).
SELECT j.job_id, j.kind, j.state, false AS is_dependency
FROM jobs AS j
WHERE j.parent_job_id = %(job_id)s::uuid
  AND (%(after_job_id)s::uuid IS NULL OR j.job_id > %(after_job_id)s::uuid)
ORDER BY j.job_id
LIMIT %(limit)s;
