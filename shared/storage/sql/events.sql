-- Statements on job_events: the recorded history of every transition.

-- name: event_list
-- One tenant's job's transitions after a sequence number, oldest first.
SELECT job_id, sequence, from_state, to_state, attempt, fencing_token, actor, reason, at
FROM job_events
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid AND sequence > %(after_sequence)s
ORDER BY sequence
LIMIT %(limit)s;
