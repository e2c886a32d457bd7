-- Tenant walls: which rows a transaction that serves one tenant sees.
-- after: 0033_claim_statements_merged

-- Row-level security. A transaction that serves one tenant calls
--     SELECT set_config('jobs.tenant', <tenant>, true)
-- and from then on sees and writes that tenant's rows only, even through a statement that forgot its
-- WHERE clause. A transaction that sets no tenant is the cross-tenant path: the API's handling of
-- worker reports and its queue gauges. The setting can be switched mid-transaction (group commit runs
-- several tenants' submissions in one). Owners and superusers bypass these policies: the walls hold
-- for jobs_api and jobs_worker, the roles the services run as.
CREATE OR REPLACE FUNCTION jobs_tenant_visible(row_tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT row_tenant = coalesce(nullif(current_setting('jobs.tenant', true), ''), row_tenant) $$;
