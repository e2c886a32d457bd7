-- Statements on job_events: the recorded history of every transition.

-- name: event_list
-- One tenant's job's transitions after a sequence number, oldest first, each failed attempt with its error.
SELECT e.job_id, e.sequence, e.from_state, e.to_state, e.attempt, e.fencing_token, e.actor, e.reason, e.at,
       a.category AS error_category, a.message AS error_message, a.traceback AS error_traceback
FROM job_events AS e
LEFT JOIN job_attempt_errors AS a
    ON a.job_id = e.job_id AND a.fencing_token = e.fencing_token AND e.from_state = 'running'
WHERE e.tenant = %(tenant)s AND e.job_id = %(job_id)s::uuid AND e.sequence > %(after_sequence)s
ORDER BY e.sequence
LIMIT %(limit)s;

-- name: attempt_error_record
-- Keeps a failed attempt's error; only for the attempt that holds the lease the report named.
INSERT INTO job_attempt_errors (job_id, tenant, attempt, fencing_token, category, message, traceback)
SELECT job_id, tenant, attempts, fencing_token, %(category)s::error_category, %(message)s, %(traceback)s
FROM jobs
WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s
ON CONFLICT (job_id, fencing_token) DO NOTHING;

-- name: change_watcher_register
-- This API process has WatchJob streams open: statements notify jobs_changed until the row expires.
INSERT INTO job_change_watchers (listener, expires_at)
VALUES (%(listener)s, clock_timestamp() + make_interval(secs => %(seconds)s))
ON CONFLICT (listener) DO UPDATE SET expires_at = EXCLUDED.expires_at;
