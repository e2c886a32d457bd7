-- The statements of jobs_outbox.enqueue and its relay, on the table outbox.sql creates.

-- name: outbox_insert
-- Writes one submission in the caller's transaction.
INSERT INTO jobs_outbox (kind, payload, idempotency_key, priority, run_after, max_attempts, deadline, resource_key,
                         resource_version, labels)
VALUES (%(kind)s, %(payload)s, %(idempotency_key)s, %(priority)s, %(run_after)s, %(max_attempts)s, %(deadline)s,
        %(resource_key)s, %(resource_version)s, %(labels)s)
RETURNING outbox_id, submission_uid;

-- name: outbox_insert_deletion
-- Writes one deletion of a resource key in the caller's transaction.
INSERT INTO jobs_outbox (action, resource_key, reason)
VALUES ('delete_resource', %(resource_key)s, %(reason)s)
RETURNING outbox_id, submission_uid;

-- name: outbox_claim
-- Locks unsent rows that are due and that no other relay holds, oldest first; a row whose resource key has an earlier unsent row waits for it (held by another relay, or waiting out a transient refusal), so a key's versions and its deletion go out in the order they were written.
SELECT o.outbox_id, o.submission_uid, o.action, o.kind, o.payload, o.idempotency_key, o.priority, o.run_after,
       o.max_attempts, o.deadline, o.resource_key, o.resource_version, o.labels, o.reason
FROM jobs_outbox AS o
WHERE o.sent_at IS NULL AND o.failed_at IS NULL AND o.next_attempt_at <= now()
  AND NOT EXISTS (SELECT 1 FROM jobs_outbox AS e
                  WHERE e.resource_key = o.resource_key AND e.outbox_id < o.outbox_id
                    AND e.sent_at IS NULL AND e.failed_at IS NULL)
ORDER BY o.next_attempt_at, o.outbox_id
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;

-- name: outbox_mark_sent
-- Records what the API did with this row: the job it accepted (none for a deletion), and a note.
UPDATE jobs_outbox SET sent_at = now(), job_id = %(job_id)s, attempts = attempts + 1, last_error = %(note)s
WHERE outbox_id = %(outbox_id)s;

-- name: outbox_mark_failed
-- Ends a row the API refused for good, or that cannot be sent, with the reason.
UPDATE jobs_outbox SET failed_at = now(), attempts = attempts + 1, last_error = %(error)s
WHERE outbox_id = %(outbox_id)s;

-- name: outbox_retry_later
-- Puts a row back after a transient refusal, waiting longer after each (at least the API's RetryInfo delay).
UPDATE jobs_outbox
SET attempts = attempts + 1, last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => greatest(%(retry_after_seconds)s,
                                                             least(%(backoff_cap_seconds)s, 2 ^ least(attempts, 16))))
WHERE outbox_id = %(outbox_id)s;
