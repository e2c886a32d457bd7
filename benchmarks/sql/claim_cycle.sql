-- The cycle that `BENCH_ONLY=claim_instructions` counts in a single-user backend
-- (benchmarks/claim_instructions.py), around the service's own claim and completion. A single-user
-- backend binds no parameters: the claimed rows pass from the claim to the completion through a table.
-- name: claimed_table_create
-- The rows the cycle's claim took, for its completion.
CREATE UNLOGGED TABLE bench_claimed (job_id uuid, fencing_token bigint);

-- name: remembered_rooms_now
-- Dates the rooms the session's last claim counted, if any, to this moment, as a claim a few
-- milliseconds after the last would find them.
SELECT set_config('jobs.claim_rooms',
                  coalesce(jsonb_set(nullif(current_setting('jobs.claim_rooms', true), '')::jsonb,
                                     '{at}', to_jsonb(extract(epoch FROM clock_timestamp())))::text, ''),
                  false);

-- name: claim_into_table
-- The service's claim of 50 echo jobs, its rows kept for the completion.
INSERT INTO bench_claimed SELECT job_id, fencing_token FROM jobs_claim('bench', ARRAY['echo'], 50, 600);

-- name: claimed_count
-- How many the claim took, printed by the backend as `claimed = "<n>"`.
SELECT count(*) AS claimed FROM bench_claimed;

-- name: claimed_clear
-- Empties the table for the next cycle.
DELETE FROM bench_claimed;
