-- The hot path: every transition writes one job_events row, every success one job_results row.
-- Their foreign keys made each of those writes look up and share-lock the job row the same statement
-- had just written, and job_events kept a second index for a surrogate key nobody reads. The rows
-- are written only by statements that hold the job row, and retention deletes them with their job.
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_fkey;
ALTER TABLE job_events DROP CONSTRAINT job_events_pkey;
ALTER TABLE job_events DROP COLUMN event_id;
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_sequence_key;
ALTER TABLE job_events ADD PRIMARY KEY (job_id, sequence);

ALTER TABLE job_results DROP CONSTRAINT job_results_job_id_fkey;

-- Retention: finished jobs in the order they may be deleted.
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled', 'superseded');
