-- The scheduling setups of `make bench`: the weights and the limits of the "on" side of the drain and of
-- the claim alone (benchmarks/fairness.py), none of which binds.
-- name: tenant_weight_insert
-- Gives `tenant` the weight `weight` in the fair shares.
INSERT INTO tenant_weights (tenant, weight, updated_by) VALUES (%(tenant)s, %(weight)s, 'bench');

-- name: tenant_limit_insert
-- Bounds `tenant:<tenant>` to 100,000 running jobs.
INSERT INTO job_limits (key, max_running, updated_by) VALUES ('tenant:' || %(tenant)s, 100000, 'bench');

-- name: kind_limit_insert
-- Bounds `kind:echo` to 100,000 running jobs and to a million starts a second (burst 100,000).
INSERT INTO job_limits (key, max_running, rate_per_second, burst, updated_by)
VALUES ('kind:echo', 100000, 1000000, 100000, 'bench');
