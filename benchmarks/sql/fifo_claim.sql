-- The claim as it was before fair shares and limits (0017): priority, then age, across every tenant,
-- with the index it used. Kept only so that `make bench` measures the claim that ships against it.
-- name: fifo_index
-- The runnable index of 0005, replacing 0017's per-kind, per-tenant one in the database this claim runs in.
DROP INDEX jobs_runnable_idx;
CREATE INDEX jobs_runnable_idx ON jobs (priority DESC, run_after, job_id) WHERE state IN ('pending', 'retry_wait');

-- name: fifo_claim_batch
-- Claims up to `limit` runnable jobs of the given kinds under a new lease, raising each fencing token.
WITH candidates AS (
    SELECT job_id
    FROM jobs
    WHERE state IN ('pending', 'retry_wait')
      AND run_after <= clock_timestamp()
      AND (deadline IS NULL OR deadline > clock_timestamp())
      AND kind = ANY (%(kinds)s::text[])
    ORDER BY priority DESC, run_after, job_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET state = 'running',
    attempts = j.attempts + 1,
    fencing_token = j.fencing_token + 1,
    lease_owner = %(worker_id)s,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
    started_at = clock_timestamp(),
    transition_actor = 'worker:' || %(worker_id)s,
    transition_reason = 'claimed'
FROM candidates AS c
WHERE j.job_id = c.job_id
RETURNING j.job_id, j.tenant, j.kind, j.payload, j.attempts, j.max_attempts, j.fencing_token,
          j.lease_expires_at, j.created_at, greatest(j.run_after, j.created_at) AS queued_since,
          j.started_at AS claimed_at, j.traceparent, j.tracestate;
