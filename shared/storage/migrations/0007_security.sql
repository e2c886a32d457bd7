-- Least privilege and tenant walls in the database.
--
-- Three NOLOGIN roles; deployments grant their LOGIN users membership in one of them:
--   jobs_migrator  owns the schema and runs later migrations;
--   jobs_api       the API: every table it needs, behind row-level security;
--   jobs_worker    the worker replicas: claim, read payloads, sweep leases, write receipts; never a
--                  result, never a job marked succeeded (only the API does that, after the fence check).
-- Roles are cluster-wide while migrations run per database: creating them tolerates roles that exist
-- already, including ones another database's migration is creating at this moment.
DO $$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['jobs_migrator', 'jobs_api', 'jobs_worker'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;
END $$;

-- The schema belongs to jobs_migrator, so a LOGIN member of it can run later migrations without being a
-- superuser. Only a migrating user that may act as jobs_migrator can hand the objects over; otherwise
-- they stay with that user, which owns them just the same.
DO $$
DECLARE
    object_name text;
BEGIN
    IF NOT pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        RETURN;
    END IF;
    FOREACH object_name IN ARRAY ARRAY['jobs', 'job_results', 'job_events', 'job_receipts', 'resource_heads'] LOOP
        EXECUTE format('ALTER TABLE %I OWNER TO jobs_migrator', object_name);
    END LOOP;
    FOREACH object_name IN ARRAY ARRAY['job_state', 'error_category'] LOOP
        EXECUTE format('ALTER TYPE %I OWNER TO jobs_migrator', object_name);
    END LOOP;
    FOREACH object_name IN ARRAY ARRAY['jobs_bump_sequence', 'jobs_record_event', 'jobs_notify_runnable',
                                       'jobs_settle_dependents', 'jobs_notify_stop'] LOOP
        EXECUTE format('ALTER FUNCTION %I() OWNER TO jobs_migrator', object_name);
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA public TO jobs_api, jobs_worker;

-- The API deletes nothing. Workers delete finished jobs, with their history and result, once the
-- retention period is over; a DELETE that names columns in its WHERE needs SELECT on those (job_id only).
GRANT SELECT, INSERT, UPDATE ON jobs, resource_heads TO jobs_api;
GRANT SELECT, INSERT ON job_results, job_events TO jobs_api;
GRANT SELECT ON job_receipts TO jobs_api;

-- Only the columns that claims, lease sweeps and deadline failures change: a worker cannot rewrite a
-- job's tenant, kind, payload or limits.
GRANT SELECT ON jobs TO jobs_worker;
GRANT UPDATE (state, attempts, fencing_token, lease_owner, lease_expires_at, started_at, finished_at, run_after,
              last_error_category, last_error_message, transition_actor, transition_reason) ON jobs TO jobs_worker;
-- Each transition a worker makes is recorded by trigger, in the worker's own transaction.
GRANT INSERT ON job_events TO jobs_worker;
GRANT SELECT, INSERT, UPDATE ON job_receipts TO jobs_worker;
GRANT DELETE ON jobs, job_events, job_results TO jobs_worker;
GRANT SELECT (job_id) ON job_events, job_results TO jobs_worker;

-- Row-level security. A transaction that serves one tenant calls
--     SELECT set_config('jobs.tenant', <tenant>, true)
-- and from then on sees and writes that tenant's rows only, even through a statement that forgot its
-- WHERE clause. A transaction that sets no tenant is the cross-tenant path: the API's handling of
-- worker reports and its queue gauges. The setting can be switched mid-transaction (group commit runs
-- several tenants' submissions in one). Owners and superusers bypass these policies: the walls hold
-- for jobs_api and jobs_worker, the roles the services run as.
CREATE FUNCTION jobs_tenant_visible(row_tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT row_tenant = coalesce(nullif(current_setting('jobs.tenant', true), ''), row_tenant) $$;

ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_results ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE job_receipts ENABLE ROW LEVEL SECURITY;
ALTER TABLE resource_heads ENABLE ROW LEVEL SECURITY;

CREATE POLICY jobs_api_tenant ON jobs TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY job_results_api_tenant ON job_results TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY job_events_api_tenant ON job_events TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY resource_heads_api_tenant ON resource_heads TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
-- Receipts carry no tenant: they are visible exactly when their job is (that subquery is walled too).
CREATE POLICY job_receipts_api_tenant ON job_receipts FOR SELECT TO jobs_api
    USING (EXISTS (SELECT 1 FROM jobs AS j WHERE j.job_id = job_receipts.job_id));

-- Workers serve every tenant. They may move a job through claim, lease expiry, retry wait and failure,
-- but a job becomes SUCCEEDED only through the API's fenced completion, which also stores the result.
CREATE POLICY jobs_worker_read ON jobs FOR SELECT TO jobs_worker USING (true);
CREATE POLICY jobs_worker_update ON jobs FOR UPDATE TO jobs_worker
    USING (true) WITH CHECK (state <> 'succeeded');
CREATE POLICY job_events_worker_insert ON job_events FOR INSERT TO jobs_worker WITH CHECK (true);
CREATE POLICY job_receipts_worker ON job_receipts TO jobs_worker USING (true) WITH CHECK (true);
-- Retention: only what belongs to a finished job can go (a DELETE's WHERE also needs the rows readable).
CREATE FUNCTION jobs_finished(id uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM jobs WHERE job_id = id
                         AND state IN ('succeeded', 'failed', 'cancelled', 'superseded')) $$;
CREATE POLICY jobs_worker_delete ON jobs FOR DELETE TO jobs_worker
    USING (state IN ('succeeded', 'failed', 'cancelled', 'superseded'));
CREATE POLICY job_events_worker_retention ON job_events FOR SELECT TO jobs_worker USING (jobs_finished(job_id));
CREATE POLICY job_events_worker_delete ON job_events FOR DELETE TO jobs_worker USING (jobs_finished(job_id));
CREATE POLICY job_results_worker_retention ON job_results FOR SELECT TO jobs_worker USING (jobs_finished(job_id));
CREATE POLICY job_results_worker_delete ON job_results FOR DELETE TO jobs_worker USING (jobs_finished(job_id));

-- Per-tenant quota on waiting jobs: a bounded count over this index, without reading finished history.
-- A hash index serves only `tenant = …`: it can never stand in for jobs_runnable_idx in the claim, which
-- has no tenant condition and needs that index's order.
CREATE INDEX jobs_tenant_queued_idx ON jobs USING hash (tenant) WHERE state IN ('pending', 'retry_wait', 'blocked');
