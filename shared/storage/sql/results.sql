-- Statements on job_results: at most one result per job, written only by a fenced completion.

-- name: result_get
-- The stored result of one tenant's job, with the job's state to explain a missing result.
SELECT j.job_id, j.state, r.payload, r.attempt, r.fencing_token, r.created_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid;

-- name: result_latest_for_resource
-- The highest submitted version of a resource key and, among its jobs, the succeeded one (else the newest).
SELECT h.latest_version, j.job_id, j.state,
       r.payload, r.attempt, r.fencing_token, r.created_at
FROM resource_heads AS h
LEFT JOIN LATERAL (
    SELECT job_id, state
    FROM jobs
    WHERE tenant = h.tenant AND resource_key = h.resource_key AND resource_version = h.latest_version
    ORDER BY (state = 'succeeded') DESC, created_at DESC
    LIMIT 1
) AS j ON true
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE h.tenant = %(tenant)s AND h.resource_key = %(resource_key)s;
