-- Statements on job_checkpoints: the stages of a job its attempts finished, each write fenced by the lease.

-- name: checkpoint_record
-- Stores a stage's checkpoint for the attempt holding the lease; always one row, saying whether the lease
-- was held (held = 0: nothing written) and, when it was, whether the job had room for another stage.
-- The job row is locked FOR NO KEY UPDATE so that concurrent checkpoints of one job count one at a time.
WITH held AS (
    SELECT job_id, tenant, attempts, fencing_token
    FROM jobs
    WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s AND state = 'running'
    FOR NO KEY UPDATE
), room AS (
    SELECT h.*, (SELECT count(*) FROM job_checkpoints AS c
                 WHERE c.job_id = h.job_id AND c.stage <> %(stage)s) AS others
    FROM held AS h
), written AS (
    INSERT INTO job_checkpoints (job_id, tenant, stage, data, attempt, fencing_token)
    SELECT job_id, tenant, %(stage)s, %(data)s, attempts, fencing_token
    FROM room
    WHERE others < %(max_stages)s
    ON CONFLICT (job_id, stage) DO UPDATE
        SET data = EXCLUDED.data, attempt = EXCLUDED.attempt, fencing_token = EXCLUDED.fencing_token,
            at = clock_timestamp()
    RETURNING stage, data, attempt, fencing_token, at
)
SELECT (SELECT count(*) FROM held) AS held, w.stage, w.data, w.attempt, w.fencing_token, w.at
FROM (SELECT 1) AS one
LEFT JOIN written AS w ON true;

-- name: checkpoint_list_for_jobs
-- The checkpoints of the jobs a worker has just claimed, for their handlers to skip finished stages.
SELECT job_id, stage, data, attempt, fencing_token, at
FROM job_checkpoints
WHERE job_id = ANY (%(job_ids)b::uuid[])
ORDER BY job_id, at, stage;

-- name: checkpoint_list
-- One tenant's job's checkpoints, oldest first, for GetJob.
SELECT stage, data, attempt, fencing_token, at
FROM job_checkpoints
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid
ORDER BY at, stage;

-- name: checkpoint_clear
-- Forgets a job's checkpoints, for a manual retry that asks every stage to run again.
DELETE FROM job_checkpoints
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid;
