-- What handlers logged, kept with their attempt: ctx.log lines and the standard logging records made
-- inside a handler, shipped by the worker and written by the API under the attempt's lease. Bounded per
-- lease (the API refuses a sequence past the bound); they go with their job (the foreign key's cascade,
-- which retention uses).
CREATE TABLE job_logs (
    job_id        uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    -- The lease the lines were logged under: unique per claim, where the attempt number is not (a
    -- pushback's next claim keeps it).
    fencing_token bigint NOT NULL,
    attempt       integer NOT NULL,
    sequence      integer NOT NULL CHECK (sequence >= 1),
    at            timestamptz NOT NULL,
    level         text NOT NULL,
    logger        text NOT NULL,
    message       text NOT NULL,
    PRIMARY KEY (job_id, fencing_token, sequence)
);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_logs OWNER TO jobs_migrator;
    END IF;
END $$;

-- The API writes the lines under the fence and reads them for the tenant; workers never touch them.
GRANT SELECT, INSERT ON job_logs TO jobs_api;
ALTER TABLE job_logs ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_logs_api_tenant ON job_logs TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
