-- Every failed attempt's error, kept beside the history: the job row holds only the latest one.

CREATE TABLE job_attempt_errors (
    job_id        uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    category      error_category NOT NULL,
    message       text NOT NULL,
    -- The bounded traceback of an unclassified exception (innermost frames last); empty otherwise.
    traceback     text NOT NULL DEFAULT '',
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, fencing_token)
);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_attempt_errors OWNER TO jobs_migrator;
    END IF;
END $$;

-- The API records an attempt's error with its fenced failure report and reads them with the history.
-- Retention removes them with their job (the foreign key's cascade).
GRANT SELECT, INSERT ON job_attempt_errors TO jobs_api;
ALTER TABLE job_attempt_errors ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_attempt_errors_api_tenant ON job_attempt_errors TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
