-- Statements on delivery sets: the jobs that together make one version of a resource. Every one filters by
-- tenant (members through their set).

-- name: delivery_set_get_by_version
-- One tenant's set of one version of a resource key; no row when none was submitted.
SELECT set_id, resource_key, resource_version, failure_policy, fan_in_job_id, member_count, created_at
FROM delivery_sets
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s AND resource_version = %(resource_version)s;

-- name: delivery_set_get_highest
-- One tenant's set of the highest version a set was submitted for under a resource key.
SELECT set_id, resource_key, resource_version, failure_policy, fan_in_job_id, member_count, created_at
FROM delivery_sets
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s
ORDER BY resource_version DESC
LIMIT 1;

-- name: delivery_set_insert
-- Stores a set's header; run under the resource head's lock, so one version gets one set.
INSERT INTO delivery_sets (tenant, resource_key, resource_version, failure_policy, fan_in_job_id, member_count,
                           created_by)
VALUES (%(tenant)s, %(resource_key)s, %(resource_version)s, %(failure_policy)s::delivery_set_failure_policy,
        %(fan_in_job_id)s::uuid, %(member_count)s, %(actor)s)
RETURNING set_id, resource_key, resource_version, failure_policy, fan_in_job_id, member_count, created_at;

-- name: delivery_set_members_insert
-- Stores a set's members by name.
INSERT INTO delivery_set_members (set_id, name, job_id)
SELECT %(set_id)s::uuid, m.name, m.job_id
FROM unnest(%(names)s::text[], %(job_ids)s::uuid[]) AS m(name, job_id);

-- name: delivery_set_get_by_id
-- One tenant's set by its id (a later page of a set names it); no row when it is not the tenant's.
SELECT set_id, resource_key, resource_version, failure_policy, fan_in_job_id, member_count, created_at
FROM delivery_sets
WHERE tenant = %(tenant)s AND set_id = %(set_id)s::uuid;

-- name: delivery_set_members_read
-- A set's members with their jobs and the sizes of their stored results (not the results: a set's may add up to hundreds of megabytes), and its fan-in, in one snapshot: never a mix of moments.
SELECT m.name, j.job_id, j.tenant, j.kind, j.state, j.attempts, j.max_attempts, j.priority, j.created_at,
       j.run_after, j.started_at, j.finished_at, j.deadline, j.last_error_category, j.last_error_message,
       j.cancel_requested, j.resource_key, j.resource_version, j.sequence, j.fencing_token, j.idempotency_key,
       j.depends_on, j.labels, octet_length(r.payload) AS result_bytes
FROM delivery_sets AS s
JOIN LATERAL (
    SELECT dm.name, dm.job_id FROM delivery_set_members AS dm WHERE dm.set_id = s.set_id
    UNION ALL
    SELECT NULL, s.fan_in_job_id WHERE s.fan_in_job_id IS NOT NULL
) AS m ON true
JOIN jobs AS j ON j.job_id = m.job_id AND j.tenant = s.tenant
LEFT JOIN job_results AS r ON r.job_id = j.job_id
WHERE s.tenant = %(tenant)s AND s.set_id = %(set_id)s::uuid
ORDER BY m.name NULLS LAST;

-- name: delivery_set_results_read
-- The stored results of some of one tenant's jobs: the members on one page of a complete set.
SELECT r.job_id, r.payload, r.attempt, r.fencing_token, r.created_at
FROM job_results AS r
JOIN jobs AS j ON j.job_id = r.job_id
WHERE j.tenant = %(tenant)s AND r.job_id = ANY (%(job_ids)s::uuid[]);
