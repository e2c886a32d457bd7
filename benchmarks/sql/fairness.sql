-- The statements of the scheduling figures (benchmarks/fairness.py) other than the service's own: what
-- they load, and what they read back of the jobs' own stamps.
-- name: others_queued_count
-- How many jobs of tenants other than `tenant` are still queued.
SELECT count(*) FROM jobs WHERE tenant <> %(tenant)s AND state IN ('pending', 'retry_wait');

-- name: others_last_start
-- When the last job of the tenants other than `tenant` started (seconds since the epoch).
SELECT extract(epoch FROM max(started_at))::float8 FROM jobs WHERE tenant <> %(tenant)s;

-- name: tenant_started_select
-- Each started job of `tenant`: its id, when it started (seconds since the epoch), and how long after its
-- insert's timestamp.
SELECT job_id::text, extract(epoch FROM started_at)::float8, extract(epoch FROM started_at - created_at)::float8
FROM jobs
WHERE tenant = %(tenant)s AND started_at IS NOT NULL;

-- name: big_tenant_insert
-- `rows` pending jobs of the tenant `big`, queued an hour ago.
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after)
SELECT 'big', 'echo', 'pending', '', 3, 3, clock_timestamp() - interval '1 hour'
FROM generate_series(1, %(rows)s);

-- name: small_tenants_insert
-- Five pending jobs for each of `tenants` tenants, small-1 to small-<tenants>.
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget)
SELECT 'small-' || t, 'echo', 'pending', '', 3, 3
FROM generate_series(1, %(tenants)s) AS t, generate_series(1, 5);

-- name: big_tenant_limits_insert
-- The limits of the claim at scale "with limits in force": the kind's, and the tenant big's.
INSERT INTO job_limits (key, max_running, rate_per_second, burst, updated_by)
VALUES ('kind:echo', 1000, 100000, 1000, 'bench'), ('tenant:big', 1000, 0, 1, 'bench');

-- name: kind_running_limit_insert
-- Bounds `kind:echo` to `max_running` running jobs.
INSERT INTO job_limits (key, max_running, updated_by) VALUES ('kind:echo', %(max_running)s, 'bench');

-- name: succeeded_spans_select
-- When each succeeded job started and finished, by the database's clock.
SELECT started_at, finished_at FROM jobs WHERE state = 'succeeded';

-- name: backlog_insert
-- `count` pending jobs of `tenant` and `kind`, each carrying the submission keys `keys` with their own
-- bounds `bounds` as a submission stores them, queued in order from now, in one statement.
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after, limit_keys, limit_key_bounds,
                  transition_actor, transition_reason)
SELECT %(tenant)s, %(kind)s, 'pending', 'x', 3, 3, clock_timestamp(), %(keys)s::text[], %(bounds)s::integer[],
       'bench', 'submitted'
FROM generate_series(1, %(count)s);

-- name: tenant_walked_count
-- How many of `tenant`'s queued jobs the claim still walks: not parked behind a key.
SELECT count(*) FROM jobs WHERE tenant = %(tenant)s AND state IN ('pending', 'retry_wait') AND parked_on IS NULL;

-- name: jobs_secondary_indexes
-- The indexes of `jobs` that no constraint owns, and how each is made: dropped before a bulk load and built
-- again after it.
SELECT i.indexname, i.indexdef
FROM pg_indexes AS i
WHERE i.schemaname = current_schema() AND i.tablename = 'jobs'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS c WHERE c.conrelid = 'jobs'::regclass AND c.conname = i.indexname);
