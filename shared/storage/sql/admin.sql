-- Statements of the operators' side: job_limits, tenant_weights, kind_pauses, admin_actions, and
-- reads of jobs across tenants (run in transactions that set no tenant, or the filter's tenant).

-- name: limit_set
-- Creates or replaces the limit of one key.
INSERT INTO job_limits AS l (key, max_running, rate_per_second, burst, updated_by)
VALUES (%(key)s, %(max_running)s, %(rate_per_second)s, %(burst)s, %(actor)s)
ON CONFLICT (key) DO UPDATE
    SET max_running = EXCLUDED.max_running, rate_per_second = EXCLUDED.rate_per_second,
        burst = EXCLUDED.burst, updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
RETURNING key, max_running, rate_per_second, burst, updated_at, updated_by;

-- name: limit_delete
-- Removes the limit of one key; no row when it had none.
DELETE FROM job_limits WHERE key = %(key)s RETURNING key;

-- name: limit_list
-- Every limit, by key.
SELECT key, max_running, rate_per_second, burst, updated_at, updated_by FROM job_limits ORDER BY key;

-- name: tenant_weight_set
-- Creates or replaces one tenant's weight.
INSERT INTO tenant_weights AS w (tenant, weight, updated_by)
VALUES (%(tenant)s, %(weight)s, %(actor)s)
ON CONFLICT (tenant) DO UPDATE
    SET weight = EXCLUDED.weight, updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
RETURNING tenant, weight, updated_at, updated_by;

-- name: tenant_weight_list
-- Every weight set, by tenant.
SELECT tenant, weight, updated_at, updated_by FROM tenant_weights ORDER BY tenant;

-- name: kind_pause
-- Pauses a kind; a kind paused already keeps its first pause (who, when, why).
INSERT INTO kind_pauses (kind, paused_by, reason)
VALUES (%(kind)s, %(actor)s, %(reason)s)
ON CONFLICT (kind) DO NOTHING;

-- name: kind_resume
-- Resumes a kind; no row when it was not paused.
DELETE FROM kind_pauses WHERE kind = %(kind)s RETURNING kind;

-- name: kind_status_list
-- Kinds with their policy, pause, recent publishers and whether those disagree; one kind or all.
SELECT k.kind, k.max_attempts, k.backoff_base_seconds, k.backoff_cap_seconds, k.timeout_seconds,
       k.external_side_effects, k.limit_keys, k.executor::text AS executor, k.retired_at,
       p.paused_at, p.paused_by, p.reason AS pause_reason,
       coalesce(pub.publishers, '{}') AS publishers, coalesce(pub.policies, 0) > 1 AS policy_conflict
FROM job_kinds AS k
LEFT JOIN kind_pauses AS p ON p.kind = k.kind
LEFT JOIN LATERAL (
    SELECT array_agg(jp.publisher ORDER BY jp.publisher) AS publishers, count(DISTINCT jp.policy_digest) AS policies
    FROM job_kind_publishers AS jp
    WHERE jp.kind = k.kind
      AND jp.last_seen_at > clock_timestamp() - make_interval(secs => %(within_seconds)s)
) AS pub ON true
WHERE (%(kind)s::text IS NULL OR k.kind = %(kind)s::text)
  AND (k.retired_at IS NULL OR %(include_retired)s)
ORDER BY k.kind;

-- name: admin_action_record
-- Records who did what and why, outside any one job's history.
INSERT INTO admin_actions (actor, action, target, reason, details)
VALUES (%(actor)s, %(action)s, %(target)s, %(reason)s, %(details)s::jsonb);

-- name: admin_job_search
-- A page of jobs across tenants matching the filter, newest first, after the cursor; one extra row detects more.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id
FROM jobs
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (cardinality(%(states)s::job_state[]) = 0 OR state = ANY (%(states)s::job_state[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(resource_key)s::text IS NULL OR resource_key = %(resource_key)s::text)
  AND labels @> %(labels)s::jsonb
  AND (%(error_text)s::text IS NULL
       OR strpos(lower(coalesce(last_error_message, '')), lower(%(error_text)s::text)) > 0)
  AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s::timestamptz)
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (created_at, job_id) < (%(after_created_at)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT %(limit)s;

-- name: admin_job_match
-- The ids and tenants of jobs a bulk action would touch: the filter, narrowed to the action's states, oldest first.
SELECT job_id, tenant
FROM jobs
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND state = ANY (%(states)s::job_state[])
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(resource_key)s::text IS NULL OR resource_key = %(resource_key)s::text)
  AND labels @> %(labels)s::jsonb
  AND (%(error_text)s::text IS NULL
       OR strpos(lower(coalesce(last_error_message, '')), lower(%(error_text)s::text)) > 0)
  AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s::timestamptz)
ORDER BY created_at, job_id
LIMIT %(limit)s;

-- name: admin_job_tenant
-- The tenant a job belongs to, whichever it is; no row for no such job.
SELECT tenant FROM jobs WHERE job_id = %(job_id)s::uuid;
