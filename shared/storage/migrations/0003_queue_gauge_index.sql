-- The queue gauges read every open job each refresh. Runnable and running rows have their partial
-- indexes already; this one covers the rest: blocked jobs, jobs waiting for a decision, and failures,
-- keyed by finish time so that only a recent window of FAILED rows is ever read. Rows enter it only on
-- those rarer transitions, never on the claim-and-complete path.
CREATE INDEX jobs_queue_gauge_idx ON jobs (state, finished_at)
    WHERE state IN ('blocked', 'failed', 'outcome_unknown');
