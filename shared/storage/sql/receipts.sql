-- Statements on job_receipts: intents and confirmations of external calls, fenced by the lease.

-- name: receipt_record_intent
-- Records that the current attempt is about to make an external call; no row when the lease is gone.
-- The job row is locked FOR SHARE, which the lease sweep's FOR UPDATE SKIP LOCKED cannot share: an
-- intent either waits for a sweep that already holds the job, and then finds its lease ended, or keeps
-- the sweep off the job until the intent is committed, where the sweep's receipt check sees it. A lease
-- past its end takes no intent even before a sweep comes by: the external call must not start.
WITH held AS (
    SELECT job_id, attempts, fencing_token, lease_expires_at
    FROM jobs
    WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s AND state = 'running'
    FOR SHARE
)
INSERT INTO job_receipts (job_id, attempt, step, fencing_token, intent)
SELECT job_id, attempts, %(step)s, fencing_token, %(intent)s
FROM held
WHERE lease_expires_at > clock_timestamp()
ON CONFLICT (job_id, attempt, step) DO UPDATE
    SET intent = EXCLUDED.intent, recorded_at = clock_timestamp()
    WHERE job_receipts.confirmed_at IS NULL AND job_receipts.fencing_token = EXCLUDED.fencing_token
RETURNING job_id;

-- name: receipt_confirm
-- Records the external call's confirmation for the current attempt; no row when the lease is gone.
-- The job row is locked FOR SHARE, as for an intent: a join would read it from the statement's snapshot,
-- unlocked, and a confirmation could then commit after the lease sweep had ended the attempt (and a newer
-- attempt had claimed the job) under that snapshot's nose. Locked, the row is read again once the sweep or
-- the claim that holds it commits, and a lease that changed meanwhile takes no confirmation; a sweep that
-- comes while the confirmation holds the row skips it until it is committed, and then sees it.
WITH held AS (
    SELECT job_id, attempts, fencing_token
    FROM jobs
    WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s AND state = 'running'
    FOR SHARE
)
UPDATE job_receipts AS r
SET receipt = %(receipt)s, confirmed_at = clock_timestamp()
FROM held AS h
WHERE r.job_id = h.job_id AND r.attempt = h.attempts AND r.fencing_token = h.fencing_token
  AND r.step = %(step)s
RETURNING r.job_id;

-- name: receipt_list
-- Every receipt of a job, for an attempt that reconciles with what earlier attempts did.
SELECT attempt, step, fencing_token, intent, receipt, recorded_at, confirmed_at
FROM job_receipts
WHERE job_id = %(job_id)s::uuid
ORDER BY attempt, recorded_at;
