-- The running tallies: running jobs counted per key as they start and stop, so that claims read a count instead of counting.
-- after: 0033_claim_statements_merged

-- The keys a running row is tallied under: its kind's, its tenant's, and the rest its claim recorded.
CREATE OR REPLACE FUNCTION jobs_running_tally_keys(kind text, tenant text, running_keys text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT ARRAY[jobs_kind_key(kind), jobs_tenant_key(tenant)] || coalesce(running_keys[3:], '{}') $$;

-- The running jobs under each of `keys`, as the tallies have them in the calling statement's snapshot.
-- In PL/pgSQL for the plan to last the session, as jobs_key_tokens.
CREATE OR REPLACE FUNCTION jobs_running_under(keys text[]) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_object_agg(r.key, r.n), '{}')
            FROM (SELECT t.key, sum(t.running) AS n
                  FROM job_running_tallies AS t
                  WHERE t.key = ANY (keys)
                  GROUP BY t.key) AS r);
END
$$;

-- Running rows deleted (retention deletes only finished ones; an operator may delete any) leave the tallies.
CREATE OR REPLACE FUNCTION jobs_tally_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO job_running_tallies AS t (key, holder, running)
    SELECT d.key, pg_backend_pid(), -count(*)
    FROM (SELECT unnest(jobs_running_tally_keys(o.kind, o.tenant, o.running_keys)) AS key
          FROM old_rows AS o
          WHERE o.state = 'running') AS d
    GROUP BY d.key
    ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION jobs_tally_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM job_running_tallies;
    RETURN NULL;
END $$;

-- The sweep's care of the tallies: the rows of exited backends folded into their key's row of holder 0
-- (a pooled connection that is replaced is a new backend), then every key's tally compared with a count
-- of the running rows that carry it, both read in one snapshot, and the difference, if any, added to
-- holder 0. Returns the keys whose tally was corrected, which only a change made with the jobs table's
-- triggers disabled can cause. Concurrent claims and completions need no lock against either step:
-- moving a sum between rows leaves it as it was, and a correction computed in one snapshot stays right
-- whatever commits after it, each such change carrying its own tally. Two sweeps correcting at once
-- would each add the same difference, so one tends at a time (a lock in the project's range beside the
-- migrations' and the metrics exporter's); a sweep that finds it taken leaves the work to the other.
-- The running rows are read by an index scan, not a bitmap: the entries of jobs that stopped running are
-- left in jobs_running_lease_idx until a vacuum, and a bitmap scan visits each one's heap row at every
-- sweep (2 ms per 20,000 jobs run since), where an index scan marks them dead once and passes them after.
CREATE OR REPLACE FUNCTION jobs_tend_running_tallies() RETURNS text[]
    LANGUAGE plpgsql VOLATILE
    SET search_path = public, pg_temp
    SET jit = off
    SET enable_bitmapscan = off
    AS $$
DECLARE
    corrected text[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(7310003) THEN
        RETURN '{}';
    END IF;
    WITH gone AS (
        DELETE FROM job_running_tallies AS t
        WHERE t.holder <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = t.holder)
        RETURNING t.key, t.running
    )
    INSERT INTO job_running_tallies AS t (key, holder, running)
    SELECT g.key, 0, sum(g.running) FROM gone AS g GROUP BY g.key
    ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running;
    DELETE FROM job_running_tallies AS t
    WHERE t.holder = 0 AND t.running = 0
      AND NOT EXISTS (SELECT 1 FROM job_running_tallies AS o WHERE o.key = t.key AND o.holder <> 0);

    WITH counted AS (
        SELECT k.key, count(*) AS n
        FROM jobs AS j, unnest(jobs_running_tally_keys(j.kind, j.tenant, j.running_keys)) AS k(key)
        WHERE j.state = 'running'
        GROUP BY k.key
    ), tallied AS (
        SELECT t.key, sum(t.running) AS n FROM job_running_tallies AS t GROUP BY t.key
    ), differences AS (
        SELECT coalesce(c.key, t.key) AS key, coalesce(c.n, 0) - coalesce(t.n, 0) AS n
        FROM counted AS c
        FULL JOIN tallied AS t ON t.key = c.key
        WHERE coalesce(c.n, 0) <> coalesce(t.n, 0)
    ), fixed AS (
        INSERT INTO job_running_tallies AS t (key, holder, running)
        SELECT d.key, 0, d.n FROM differences AS d
        ON CONFLICT (key, holder) DO UPDATE SET running = t.running + EXCLUDED.running
        RETURNING t.key
    )
    SELECT coalesce(array_agg(f.key ORDER BY f.key), '{}') INTO corrected FROM fixed AS f;
    RETURN corrected;
END
$$;
