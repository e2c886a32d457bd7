-- Statements on job_results: at most one result per job, written only by a fenced completion.

-- name: result_get
-- The stored result of one tenant's job, with the job's state to explain a missing result.
SELECT j.job_id, j.state, r.payload, r.attempt, r.fencing_token, r.created_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid;
