-- The work-down's own reads (benchmarks/scenarios.py, benchmarks/harness.py): which server processes
-- serve its database, and how long its jobs waited and held their leases by the jobs' own stamps.
-- name: database_backends
-- The server processes of the sessions on this database, but the asking one's.
SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid();

-- name: succeeded_stamps
-- Of the succeeded jobs: the mean and median time from insert to claim and from claim to completion
-- (seconds), by the database's clock.
SELECT avg(extract(epoch FROM started_at - created_at))::float8 AS wait_mean,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))::float8 AS wait_p50,
       avg(extract(epoch FROM finished_at - started_at))::float8 AS held_mean,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))::float8 AS held_p50
FROM jobs
WHERE state = 'succeeded';
