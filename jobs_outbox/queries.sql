-- The statements of jobs_outbox.enqueue and its relay, on the table outbox.sql creates.

-- name: outbox_insert
-- Writes one submission in the caller's transaction.
INSERT INTO jobs_outbox (kind, payload, idempotency_key, priority, run_after, max_attempts, deadline, resource_key,
                         resource_version, labels)
VALUES (%(kind)s, %(payload)s, %(idempotency_key)s, %(priority)s, %(run_after)s, %(max_attempts)s, %(deadline)s,
        %(resource_key)s, %(resource_version)s, %(labels)s)
RETURNING outbox_id, submission_uid;

-- name: outbox_claim
-- Locks unsent rows that are due and that no other relay holds, oldest first.
SELECT outbox_id, submission_uid, kind, payload, idempotency_key, priority, run_after, max_attempts, deadline,
       resource_key, resource_version, labels
FROM jobs_outbox
WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
ORDER BY next_attempt_at, outbox_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: outbox_mark_sent
-- Records the job the API accepted for this row.
UPDATE jobs_outbox SET sent_at = now(), job_id = %(job_id)s, attempts = attempts + 1, last_error = ''
WHERE outbox_id = %(outbox_id)s;

-- name: outbox_mark_failed
-- Ends a row the API refused for good.
UPDATE jobs_outbox SET failed_at = now(), attempts = attempts + 1, last_error = %(error)s
WHERE outbox_id = %(outbox_id)s;

-- name: outbox_retry_later
-- Puts a row back after a transient refusal, waiting longer after each.
UPDATE jobs_outbox
SET attempts = attempts + 1, last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => least(%(backoff_cap_seconds)s, 2 ^ least(attempts, 16)))
WHERE outbox_id = %(outbox_id)s;
