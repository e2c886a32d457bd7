-- Statements behind DeleteResource: a resource key's tombstone and what it ends. Every one filters by tenant.

-- name: resource_head_lock_existing
-- Locks one tenant's resource head for a deletion, in the order a submission takes it; no row for an unknown key.
SELECT latest_version, deleted_version
FROM resource_heads
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s
FOR UPDATE;

-- name: resource_tombstone_write
-- Marks every version submitted so far as deleted.
UPDATE resource_heads
SET deleted_version = latest_version, updated_at = clock_timestamp()
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s
RETURNING deleted_version;

-- name: job_cancel_deleted_resource
-- Ends the deleted versions' unfinished jobs CANCELLED at once, running ones included: their lease is taken
-- away, the worker hears it (jobs_stop, then its heartbeat) and its completion finds no running row.
UPDATE jobs
SET state = 'cancelled', cancel_requested = true, finished_at = clock_timestamp(),
    lease_owner = NULL, lease_expires_at = NULL,
    transition_actor = %(actor)s, transition_reason = 'resource deleted: ' || %(reason)s
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s AND resource_version <= %(deleted_version)s
  AND state IN ('pending', 'blocked', 'retry_wait', 'running', 'outcome_unknown')
RETURNING job_id, state;

-- name: result_delete_deleted_resource
-- Deletes the stored results of the deleted versions; the jobs and their histories stay.
DELETE FROM job_results AS r
USING jobs AS j
WHERE r.job_id = j.job_id AND j.tenant = %(tenant)s AND j.resource_key = %(resource_key)s
  AND j.resource_version <= %(deleted_version)s
RETURNING r.job_id;

-- name: resource_deletion_record
-- Records who deleted which versions of a key, why, and what it ended.
INSERT INTO resource_deletions (tenant, resource_key, deleted_version, actor, reason, cancelled_jobs, deleted_results)
VALUES (%(tenant)s, %(resource_key)s, %(deleted_version)s, %(actor)s, %(reason)s, %(cancelled_jobs)s,
        %(deleted_results)s)
RETURNING deletion_id, deleted_at;
