-- Statements on job_logs: what handlers logged, per lease, fenced like every worker report.

-- name: log_append_batch
-- Keeps the lines of every named attempt that still holds its lease; a lease not returned was refused.
-- A line sent again after a lost answer is kept once (its key is the lease and its sequence), and a
-- sequence past the per-lease bound is dropped. Share-locks the rows in job-id order, as the other
-- report batches do, so lines racing the attempt's end wait and re-check.
WITH shipped AS (
    SELECT *
    FROM unnest(%(job_ids)s::uuid[], %(fencing_tokens)s::bigint[], %(sequences)s::int[], %(ats)s::timestamptz[],
                %(levels)s::text[], %(loggers)s::text[], %(messages)s::text[])
         AS s(job_id, fencing_token, sequence, at, level, logger, message)
), held AS (
    SELECT j.job_id, j.tenant, j.attempts, j.fencing_token
    FROM jobs AS j
    WHERE j.job_id IN (SELECT job_id FROM shipped)
      -- As text, so no partial index matches: rows are found by their key (see job_complete_batch).
      AND j.state::text = 'running'
    ORDER BY j.job_id
    FOR SHARE OF j
), written AS (
    INSERT INTO job_logs (job_id, tenant, fencing_token, attempt, sequence, at, level, logger, message)
    SELECT h.job_id, h.tenant, h.fencing_token, h.attempts, s.sequence, s.at, s.level, s.logger, s.message
    FROM shipped AS s
    JOIN held AS h ON h.job_id = s.job_id AND h.fencing_token = s.fencing_token
    WHERE s.sequence BETWEEN 1 AND %(sequence_max)s
    ON CONFLICT (job_id, fencing_token, sequence) DO NOTHING
)
SELECT job_id, fencing_token
FROM held
WHERE (job_id, fencing_token) IN (SELECT job_id, fencing_token FROM shipped);

-- name: log_list
-- One tenant's job's handler log after a position (lease, then sequence), oldest first; one attempt's
-- lines alone when attempt is not 0.
SELECT attempt, fencing_token, sequence, at, level, logger, message
FROM job_logs
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid
  AND (fencing_token, sequence) > (%(after_fencing_token)s, %(after_sequence)s)
  AND (%(attempt)s = 0 OR attempt = %(attempt)s)
ORDER BY fencing_token, sequence
LIMIT %(limit)s;
