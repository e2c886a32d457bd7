-- Statements on job_progress: the latest progress of each job's running attempt, fenced by the lease.

-- name: progress_record_batch
-- Stores the latest progress of every named attempt that still holds its lease and wakes the job's
-- watchers; a report not returned was refused. The rows are share-locked in job-id order (as the
-- heartbeat and completion batches lock them), so a report racing the attempt's end waits and re-checks.
WITH reported AS (
    SELECT *
    FROM unnest(%(job_ids)s::uuid[], %(fencing_tokens)s::bigint[], %(fractions)s::float8[], %(messages)s::text[])
         AS r(job_id, fencing_token, fraction, message)
), held AS (
    SELECT j.job_id, j.tenant, j.attempts, j.fencing_token, r.fraction, r.message
    FROM jobs AS j
    JOIN reported AS r ON j.job_id = r.job_id AND j.fencing_token = r.fencing_token
    -- As text, so no partial index matches: rows are found by their key (see job_complete_batch).
    WHERE j.state::text = 'running'
    ORDER BY j.job_id
    FOR SHARE OF j
), written AS (
    INSERT INTO job_progress (job_id, tenant, fraction, message, attempt, fencing_token)
    SELECT job_id, tenant, fraction, message, attempts, fencing_token
    FROM held
    ON CONFLICT (job_id) DO UPDATE
        SET fraction = EXCLUDED.fraction, message = EXCLUDED.message, attempt = EXCLUDED.attempt,
            fencing_token = EXCLUDED.fencing_token, updated_at = clock_timestamp(),
            revision = job_progress.revision + 1
    RETURNING job_id, fencing_token
)
-- Watchers hear of it only while a WatchJob stream is open somewhere (0027_notify_changes_only_while_watched.sql).
SELECT job_id, fencing_token,
       CASE WHEN jobs_changes_watched() THEN pg_notify('jobs_changed', job_id::text || ':progress') END AS notified
FROM written;

-- name: progress_get
-- One tenant's job's latest progress, for GetJob and WatchJob.
SELECT fraction, message, attempt, updated_at, revision
FROM job_progress
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid;
