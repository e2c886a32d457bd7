-- The grammar of limit keys, the one place the database writes or reads one (shared/domain/limit_keys.py is
-- the same grammar in Python; tests/test_limit_keys.py holds the two to each other).
-- after: 0033_claim_statements_merged
--
-- Every job carries `kind:<kind>` and `tenant:<tenant>`; a kind may declare keys of any other form; a
-- submission's own key `<name>` is stored as `tenant:<tenant>/<name>`. No tenant name holds a `/` (the API
-- refuses such a principal at start) and no name does, so a key names one kind, one tenant, or one name of
-- one tenant: a tenant's own keys can never be another tenant's. Each function is one expression, which
-- the planner inlines into the statement that calls it.

-- The key every job of `kind` carries.
CREATE OR REPLACE FUNCTION jobs_kind_key(kind text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'kind:' || kind $$;

-- The key every job of `tenant` carries.
CREATE OR REPLACE FUNCTION jobs_tenant_key(tenant text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'tenant:' || tenant $$;

-- A submission's own key `name`, scoped to its tenant.
CREATE OR REPLACE FUNCTION jobs_own_key(tenant text, name text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 'tenant:' || tenant || '/' || name $$;

-- The tenant whose key `key` is (its implicit key or one of its own), or NULL for a kind's or a declared key.
CREATE OR REPLACE FUNCTION jobs_key_tenant(key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN starts_with(key, 'tenant:') THEN split_part(substr(key, 8), '/', 1) END $$;
