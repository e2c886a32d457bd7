-- The lifecycle: receipts of external calls, resource versions, dependencies and cancel wake-ups.

-- The attempt budget the caller asked for; RetryJob grants this many more attempts.
ALTER TABLE jobs ADD COLUMN retry_budget integer;
UPDATE jobs SET retry_budget = max_attempts;
ALTER TABLE jobs ALTER COLUMN retry_budget SET NOT NULL;
ALTER TABLE jobs ADD CONSTRAINT jobs_retry_budget_positive CHECK (retry_budget >= 1);

-- Intent and confirmation of an external call made by one attempt, under that attempt's lease.
CREATE TABLE job_receipts (
    job_id        uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    attempt       integer NOT NULL,
    step          text NOT NULL,
    fencing_token bigint NOT NULL,
    intent        bytea NOT NULL,
    receipt       bytea,
    recorded_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    confirmed_at  timestamptz,
    PRIMARY KEY (job_id, attempt, step)
);

-- Per tenant and resource key, the highest version submitted: what GetLatestResult answers for.
-- Its row lock also serialises submissions of one resource key.
CREATE TABLE resource_heads (
    tenant         text NOT NULL,
    resource_key   text NOT NULL,
    latest_version bigint NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, resource_key)
);

INSERT INTO resource_heads (tenant, resource_key, latest_version)
SELECT tenant, resource_key, max(resource_version)
FROM jobs WHERE resource_key IS NOT NULL
GROUP BY tenant, resource_key;

-- Dependents waiting on a job, found when it ends.
CREATE INDEX jobs_blocked_depends_on_idx ON jobs USING gin (depends_on) WHERE state = 'blocked';

-- When a job ends, wake its blocked dependents: runnable once every dependency succeeded, FAILED as
-- soon as one ended otherwise. A dependent that fails fires this trigger in turn, so failure cascades.
CREATE FUNCTION jobs_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'succeeded' THEN
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
        WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[NEW.job_id];
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_settle_dependents AFTER UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'superseded'))
    EXECUTE FUNCTION jobs_settle_dependents();

-- Tells workers at once that a job they may hold was cancelled or superseded, so a handler stops
-- within a second instead of at its next heartbeat.
CREATE FUNCTION jobs_notify_stop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobs_stop', NEW.job_id::text);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_stop AFTER UPDATE ON jobs
    FOR EACH ROW
    WHEN (OLD.state = 'running' AND (
          (NEW.cancel_requested AND NOT OLD.cancel_requested) OR NEW.state = 'superseded'))
    EXECUTE FUNCTION jobs_notify_stop();
