-- Stage checkpoints and progress of running jobs. Both are written by the API, each statement fenced by
-- the lease that reported it; both go with their job (the foreign keys' cascade, which retention uses).

-- What stages of a job are done, and the small record each left (a pointer to its durable output):
-- one row per stage, kept across attempts so that a later attempt skips what an earlier one finished.
CREATE TABLE job_checkpoints (
    job_id        uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    stage         text NOT NULL,
    data          bytea NOT NULL,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, stage)
);

-- The latest progress a running attempt reported; one row per job, overwritten (revision counts writes).
CREATE TABLE job_progress (
    job_id        uuid PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    fraction      double precision NOT NULL CHECK (fraction >= 0 AND fraction <= 1),
    message       text NOT NULL DEFAULT '',
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    revision      bigint NOT NULL DEFAULT 1
);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_checkpoints OWNER TO jobs_migrator;
        ALTER TABLE job_progress OWNER TO jobs_migrator;
    END IF;
END $$;

-- The API writes both under the fence and reads them for the tenant (DELETE: a RetryJob that asks for a
-- fresh start). Workers read checkpoints when they claim; they write neither.
GRANT SELECT, INSERT, UPDATE, DELETE ON job_checkpoints TO jobs_api;
GRANT SELECT, INSERT, UPDATE ON job_progress TO jobs_api;
GRANT SELECT ON job_checkpoints TO jobs_worker;
ALTER TABLE job_checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_progress ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_checkpoints_api_tenant ON job_checkpoints TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY job_progress_api_tenant ON job_progress TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY job_checkpoints_worker_read ON job_checkpoints FOR SELECT TO jobs_worker USING (true);
