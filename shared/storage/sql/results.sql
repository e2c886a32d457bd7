-- Statements behind GetJobResult and GetLatestResult. A job has at most one result, written only by a
-- fenced completion and never changed afterwards: what lets the API replicas cache these answers.

-- name: result_get
-- The stored result of one tenant's job, with the job's state to explain a missing result.
SELECT j.job_id, j.state, r.payload, r.attempt, r.fencing_token, r.created_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid;

-- name: resource_head_get
-- The highest version submitted for one tenant's resource key; no row when none was.
SELECT latest_version
FROM resource_heads
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s;

-- name: result_for_resource_version
-- One version of a tenant's resource key: its succeeded job with the result, else its newest job.
SELECT j.job_id, j.tenant, j.kind, j.state, j.attempts, j.max_attempts, j.priority, j.created_at, j.run_after,
       j.started_at, j.finished_at, j.deadline, j.last_error_category, j.last_error_message, j.cancel_requested,
       j.resource_key, j.resource_version, j.sequence, j.fencing_token, j.idempotency_key, j.depends_on, j.labels,
       r.payload AS result_payload, r.attempt AS result_attempt, r.fencing_token AS result_fencing_token,
       r.created_at AS result_created_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.tenant = %(tenant)s AND j.resource_key = %(resource_key)s AND j.resource_version = %(resource_version)s
ORDER BY (j.state = 'succeeded') DESC, j.created_at DESC
LIMIT 1;
