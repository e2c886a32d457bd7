-- Limits hold only values every claim can honour. A claim refills a rated key's bucket by
-- rate × idle seconds in double precision: a rate of 1e308 overflowed after two idle seconds, and a
-- denormal one underflowed to zero, either way raising "value out of range" in every claim that read
-- the key (and in GetJob's waiting reason and the limit gauges) until the limit was deleted. SetLimit now
-- refuses such values (shared/domain/admin.py, RATE_PER_SECOND_RANGE); a row stored before is brought to
-- the nearest value in bounds here, the change recorded as an admin action, and the bounds become the
-- table's own constraints, so no writer can store one again.
WITH clamped AS (
    SELECT key,
           CASE WHEN rate_per_second > 1e6 THEN 1e6
                WHEN rate_per_second > 0 AND rate_per_second < 1e-6 THEN 1e-6
                ELSE rate_per_second END AS rate_per_second,
           least(burst, 1000000) AS burst,
           least(max_running, 1000000) AS max_running,
           rate_per_second AS old_rate, burst AS old_burst, max_running AS old_max_running
    FROM job_limits
    WHERE rate_per_second > 1e6 OR (rate_per_second > 0 AND rate_per_second < 1e-6)
       OR burst > 1000000 OR max_running > 1000000
), changed AS (
    UPDATE job_limits AS l
    SET rate_per_second = c.rate_per_second, burst = c.burst, max_running = c.max_running,
        updated_at = clock_timestamp(), updated_by = 'migration:limits_a_claim_can_honour'
    FROM clamped AS c
    WHERE l.key = c.key
    RETURNING c.*
)
INSERT INTO admin_actions (actor, action, target, reason, details)
SELECT 'migration:limits_a_claim_can_honour', 'set_limit', c.key,
       'brought within the bounds a claim can honour',
       jsonb_build_object('max_running', c.max_running, 'rate_per_second', c.rate_per_second, 'burst', c.burst,
                          'was', jsonb_build_object('max_running', c.old_max_running,
                                                    'rate_per_second', c.old_rate, 'burst', c.old_burst))
FROM changed AS c;

ALTER TABLE job_limits
    ADD CONSTRAINT job_limits_rate_honourable
        CHECK (rate_per_second = 0 OR rate_per_second BETWEEN 1e-6 AND 1e6),
    ADD CONSTRAINT job_limits_burst_honourable CHECK (burst BETWEEN 1 AND 1000000),
    ADD CONSTRAINT job_limits_max_running_honourable CHECK (max_running BETWEEN 0 AND 1000000);
