-- The chaos run's own statements: the private server's setup, the wait for the run to settle, and the
-- final state of the database that the checker reads (written into the history as db.* records).

-- name: database_create
-- The database the run's services use, on the run's private server.
CREATE DATABASE jobs

-- name: service_logins_create
-- The API's and the workers' least-privileged logins, as the deploy creates them.
CREATE ROLE api_login LOGIN IN ROLE jobs_api;
CREATE ROLE worker_login LOGIN IN ROLE jobs_worker

-- name: jobs_unsettled_count
-- Jobs that still move on their own: waiting to run, waiting out a backoff, or running.
SELECT count(*) AS unsettled FROM jobs WHERE state IN ('pending', 'retry_wait', 'running');

-- name: snapshot_jobs
-- Every job as it stands at the end of the run.
SELECT job_id::text AS job_id, tenant, kind, state::text AS state, attempts, max_attempts, fencing_token,
       idempotency_key, resource_key, resource_version, depends_on::text[] AS depends_on, labels,
       cancel_requested, limit_keys, extract(epoch FROM lease_expires_at)::float8 AS lease_expires_at,
       extract(epoch FROM run_after)::float8 AS run_after
FROM jobs
ORDER BY created_at, job_id;

-- name: snapshot_events
-- Every recorded transition, in each job's order, with the database's time as seconds since the epoch.
SELECT job_id::text AS job_id, sequence, from_state::text AS from_state, to_state::text AS to_state, attempt,
       fencing_token, actor, reason, extract(epoch FROM at)::float8 AS at
FROM job_events
ORDER BY job_id, sequence;

-- name: snapshot_results
-- Every stored result; payloads are the handlers' JSON text.
SELECT job_id::text AS job_id, tenant, convert_from(payload, 'UTF8') AS payload, attempt, fencing_token,
       extract(epoch FROM created_at)::float8 AS at
FROM job_results
ORDER BY job_id;

-- name: snapshot_receipts
-- Every external call's receipt, with the token of the lease that wrote it.
SELECT job_id::text AS job_id, attempt, step, fencing_token,
       extract(epoch FROM recorded_at)::float8 AS recorded_at,
       extract(epoch FROM confirmed_at)::float8 AS confirmed_at
FROM job_receipts
ORDER BY job_id, attempt, step;

-- name: snapshot_checkpoints
-- Every stage checkpoint, with the token of the lease that wrote it.
SELECT job_id::text AS job_id, stage, attempt, fencing_token, extract(epoch FROM at)::float8 AS at
FROM job_checkpoints
ORDER BY job_id, stage;

-- name: snapshot_attempt_errors
-- Every failed attempt's error, with the token of the lease that reported it.
SELECT job_id::text AS job_id, attempt, fencing_token, category::text AS category, extract(epoch FROM at)::float8 AS at
FROM job_attempt_errors
ORDER BY job_id, fencing_token;
