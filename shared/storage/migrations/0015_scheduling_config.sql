-- What operators set for scheduling: limits by key, tenant weights, paused kinds, and the record of every
-- administrative action. The claim reads these; only the API (for principals with the admin role) writes.

-- A limit on the jobs that carry `key`: at most `max_running` running at once, started at no more than
-- `rate_per_second` (token bucket of `burst`). 0 means no bound of that kind.
CREATE TABLE job_limits (
    key             text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 200),
    max_running     integer NOT NULL DEFAULT 0 CHECK (max_running >= 0),
    rate_per_second double precision NOT NULL DEFAULT 0
                    CHECK (rate_per_second >= 0 AND rate_per_second < 'infinity'::double precision),
    burst           integer NOT NULL DEFAULT 1 CHECK (burst >= 1),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by      text NOT NULL
);

-- A tenant's share of the claim against other tenants' runnable jobs; a tenant without a row weighs 1.
CREATE TABLE tenant_weights (
    tenant     text PRIMARY KEY,
    weight     integer NOT NULL CHECK (weight BETWEEN 1 AND 10000),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by text NOT NULL
);

-- A paused kind's jobs stay waiting and none is claimed; submissions are still accepted.
CREATE TABLE kind_pauses (
    kind      text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    paused_by text NOT NULL,
    reason    text NOT NULL DEFAULT ''
);

-- Who did what and why, for actions that are not a job's own history (limits, weights, pauses, bulk
-- actions: each affected job also gets its event).
CREATE TABLE admin_actions (
    action_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor     text NOT NULL,
    action    text NOT NULL,
    target    text NOT NULL DEFAULT '',
    reason    text NOT NULL DEFAULT '',
    details   jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX admin_actions_at_idx ON admin_actions (at);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_limits OWNER TO jobs_migrator;
        ALTER TABLE tenant_weights OWNER TO jobs_migrator;
        ALTER TABLE kind_pauses OWNER TO jobs_migrator;
        ALTER TABLE admin_actions OWNER TO jobs_migrator;
    END IF;
END $$;

GRANT SELECT, INSERT, UPDATE, DELETE ON job_limits, tenant_weights, kind_pauses TO jobs_api;
GRANT SELECT, INSERT ON admin_actions TO jobs_api;
GRANT SELECT ON job_limits, tenant_weights, kind_pauses TO jobs_worker;
