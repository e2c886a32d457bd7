-- De-duplication by input. A job submitted with dedupe_by_input carries the SHA-256 of its payload; an
-- identical later submission that asks for it too finds the job through this index and attaches to it.
-- Jobs submitted without it carry no digest and never enter the index, so they pay nothing for it.
ALTER TABLE jobs ADD COLUMN input_digest bytea;

-- Only the states a submission may attach to. Ordered by finish time (unfinished ones as infinity), so
-- the lookup reads the unfinished jobs and the successes inside the window and stops there, however
-- many older successes of the same input the table keeps.
CREATE INDEX jobs_dedupe_input_idx
    ON jobs (tenant, kind, input_digest, (coalesce(finished_at, 'infinity'::timestamptz)))
    WHERE input_digest IS NOT NULL
      AND state IN ('pending', 'blocked', 'retry_wait', 'running', 'succeeded');
