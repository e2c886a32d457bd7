-- The queues of the sequences' claim cost (benchmarks/sequences.py): the same pending jobs of four tenants,
-- in sequences of `length` on one side and plain on the other.

-- name: sequenced_insert
-- `sequences` sequences of `length` pending jobs, as submissions leave them: each sequence's first job its
-- head, the others parked on '' behind it; spread over four tenants, queued an hour ago in acceptance order.
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after, sequence_key,
                  sequence_position, parked_on)
SELECT 'bench-' || (s %% 4), 'echo', 'pending', '', 3, 3,
       clock_timestamp() - interval '1 hour' + make_interval(secs => p), 'seq-' || s,
       p::bigint * 1000000 + s, CASE WHEN p > 1 THEN '' END
FROM generate_series(1, %(sequences)s) AS s, generate_series(1, %(length)s) AS p;

-- name: plain_insert
-- The same jobs without sequences.
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, run_after)
SELECT 'bench-' || (s %% 4), 'echo', 'pending', '', 3, 3, clock_timestamp() - interval '1 hour' + make_interval(secs => p)
FROM generate_series(1, %(sequences)s) AS s, generate_series(1, %(length)s) AS p;
