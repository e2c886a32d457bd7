-- Deleted resources (tombstones) and delivery sets.

-- A resource key's tombstone: every version at or below `deleted_version` is gone for good. Its jobs were
-- cancelled, their results deleted, and no completion, submission or retry of those versions is taken
-- again. A higher version may still be submitted: it is a new document under the same key.
ALTER TABLE resource_heads ADD COLUMN deleted_version bigint NOT NULL DEFAULT 0 CHECK (deleted_version >= 0);

-- Who deleted which versions of a key, when and why; one row per DeleteResource call.
CREATE TABLE resource_deletions (
    deletion_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text NOT NULL,
    resource_key    text NOT NULL,
    deleted_version bigint NOT NULL,
    actor           text NOT NULL,
    reason          text NOT NULL,
    cancelled_jobs  integer NOT NULL,
    deleted_results integer NOT NULL,
    deleted_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX resource_deletions_key_idx ON resource_deletions (tenant, resource_key, deleted_at);

-- One delivery set: the jobs that together make one version of a resource (text, image, audio of lesson
-- version 7). It is complete when every member succeeded; the optional fan-in job depends on every member.
CREATE TYPE delivery_set_failure_policy AS ENUM ('fail_set', 'wait_for_manual_retry');

CREATE TABLE delivery_sets (
    set_id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant           text NOT NULL,
    resource_key     text NOT NULL,
    resource_version bigint NOT NULL CHECK (resource_version >= 1),
    failure_policy   delivery_set_failure_policy NOT NULL,
    -- Retention may delete a long-finished member's job (and its row here): a set with fewer members than
    -- it was submitted with can never be delivered again.
    member_count     integer NOT NULL CHECK (member_count BETWEEN 1 AND 100),
    fan_in_job_id    uuid REFERENCES jobs (job_id) ON DELETE SET NULL,
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- One set per version of a key: the set is what that version is.
    UNIQUE (tenant, resource_key, resource_version)
);

CREATE TABLE delivery_set_members (
    set_id uuid NOT NULL REFERENCES delivery_sets (set_id) ON DELETE CASCADE,
    name   text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    job_id uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    PRIMARY KEY (set_id, name)
);
CREATE INDEX delivery_set_members_job_idx ON delivery_set_members (job_id);

-- A fan-in of a wait_for_manual_retry set stays BLOCKED when a member fails, until the member is retried
-- and succeeds; any other dependent fails with its dependency, as before.
ALTER TABLE jobs ADD COLUMN waits_for_manual_retry boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION jobs_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'succeeded' THEN
        PERFORM 1 FROM jobs AS d
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id]
        ORDER BY d.job_id
        FOR UPDATE;
        UPDATE jobs AS d
        SET state = 'pending', run_after = greatest(d.run_after, clock_timestamp()),
            transition_actor = 'system', transition_reason = 'dependencies succeeded'
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id]
          AND NOT EXISTS (
              SELECT 1 FROM jobs AS p
              WHERE p.job_id = ANY (d.depends_on) AND p.state <> 'succeeded');
    ELSE
        UPDATE jobs AS d
        SET state = 'failed', finished_at = clock_timestamp(),
            last_error_category = 'permanent',
            last_error_message = 'dependency ' || NEW.job_id || ' ended ' || NEW.state,
            transition_actor = 'system', transition_reason = 'dependency ' || NEW.job_id || ' ended ' || NEW.state
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id]
          -- A failed member leaves a waiting set's fan-in blocked; cancel and supersede still end it.
          AND NOT (d.waits_for_manual_retry AND NEW.state = 'failed');
    END IF;
    RETURN NULL;
END $$;

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE resource_deletions OWNER TO jobs_migrator;
        ALTER TABLE delivery_sets OWNER TO jobs_migrator;
        ALTER TABLE delivery_set_members OWNER TO jobs_migrator;
        ALTER TYPE delivery_set_failure_policy OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_settle_dependents() OWNER TO jobs_migrator;
    END IF;
END $$;

-- A deletion removes the results of the deleted versions; jobs and their histories stay.
GRANT DELETE ON job_results TO jobs_api;
GRANT SELECT, INSERT ON resource_deletions, delivery_sets, delivery_set_members TO jobs_api;

ALTER TABLE resource_deletions ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_sets ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_set_members ENABLE ROW LEVEL SECURITY;
CREATE POLICY resource_deletions_api_tenant ON resource_deletions TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY delivery_sets_api_tenant ON delivery_sets TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
-- Members carry no tenant: they are visible exactly when their set is (that subquery is walled too).
CREATE POLICY delivery_set_members_api_tenant ON delivery_set_members TO jobs_api
    USING (EXISTS (SELECT 1 FROM delivery_sets AS s WHERE s.set_id = delivery_set_members.set_id))
    WITH CHECK (EXISTS (SELECT 1 FROM delivery_sets AS s WHERE s.set_id = delivery_set_members.set_id));
