-- Statements behind GetJobResult and GetLatestResult. A job has at most one result, written only by a
-- fenced completion and never changed afterwards: what lets the API replicas cache these answers.

-- name: result_get
-- The stored result of one tenant's job, with the job's state to explain a missing result and its resource;
-- no row for a job whose resource version was deleted.
SELECT j.job_id, j.state, j.resource_key, j.resource_version, r.payload, r.attempt, r.fencing_token, r.created_at
FROM jobs AS j
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid
  AND NOT EXISTS (SELECT 1 FROM resource_heads AS h
                  WHERE h.tenant = j.tenant AND h.resource_key = j.resource_key
                    AND h.deleted_version >= j.resource_version);

-- name: resource_head_get
-- The highest version submitted for one tenant's resource key and the highest deleted; no row when none was.
SELECT latest_version, deleted_version
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

-- name: dependency_results_page
-- A page of the stored results of the jobs a running job depends on, in job-id order after `after_job_id`,
-- read only for the holder of its current lease and only within its tenant; at most `max_bytes` of payload
-- unless the first result alone is larger. No row at all when the lease is not held.
WITH holder AS (
    SELECT job_id, tenant, depends_on
    FROM jobs
    WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s AND state = 'running'
), page AS (
    SELECT r.job_id, r.payload,
           sum(octet_length(r.payload)) OVER (ORDER BY r.job_id) AS running_bytes,
           row_number() OVER (ORDER BY r.job_id) AS position
    FROM holder AS h
    JOIN job_results AS r ON r.job_id = ANY (h.depends_on) AND r.tenant = h.tenant
    WHERE %(after_job_id)s::uuid IS NULL OR r.job_id > %(after_job_id)s::uuid
)
SELECT h.job_id AS holder_id, p.job_id, p.payload, p.running_bytes, p.position,
       (SELECT count(*) FROM page) AS remaining
FROM holder AS h
LEFT JOIN page AS p ON p.running_bytes <= %(max_bytes)s OR p.position = 1
ORDER BY p.job_id;
