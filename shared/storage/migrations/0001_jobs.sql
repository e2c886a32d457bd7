-- Jobs, their results (at most one per job) and the history of every transition.
-- Times that decide leases come from clock_timestamp(), the database's clock, never a worker's.

CREATE TYPE job_state AS ENUM (
    'pending', 'blocked', 'running', 'retry_wait',
    'succeeded', 'failed', 'cancelled', 'superseded', 'outcome_unknown'
);

CREATE TYPE error_category AS ENUM ('retryable', 'permanent', 'outcome_unknown');

CREATE TABLE jobs (
    job_id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant              text NOT NULL,
    kind                text NOT NULL,
    state               job_state NOT NULL,
    payload             bytea NOT NULL,
    priority            integer NOT NULL DEFAULT 0,
    run_after           timestamptz NOT NULL DEFAULT clock_timestamp(),
    deadline            timestamptz,
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts        integer NOT NULL CHECK (max_attempts >= 1),
    -- Retry backoff: full jitter in [0, min(cap, base * 2^(attempt-1))] seconds.
    backoff_base_seconds double precision NOT NULL DEFAULT 1 CHECK (backoff_base_seconds >= 0),
    backoff_cap_seconds  double precision NOT NULL DEFAULT 300 CHECK (backoff_cap_seconds >= 0),
    idempotency_key     text,
    request_digest      bytea,
    resource_key        text,
    resource_version    bigint,
    depends_on          uuid[] NOT NULL DEFAULT '{}',
    labels              jsonb NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at          timestamptz,
    finished_at         timestamptz,
    -- The current lease. fencing_token rises with every claim and is never reset.
    fencing_token       bigint NOT NULL DEFAULT 0,
    lease_owner         text,
    lease_expires_at    timestamptz,
    cancel_requested    boolean NOT NULL DEFAULT false,
    last_error_category error_category,
    last_error_message  text,
    -- Rises with every change of state or of cancel_requested (set by trigger).
    sequence            bigint NOT NULL DEFAULT 1,
    -- Who made the latest transition and why; copied into job_events by trigger.
    transition_actor    text NOT NULL DEFAULT 'system',
    transition_reason   text NOT NULL DEFAULT '',
    CONSTRAINT jobs_resource_version_with_key CHECK ((resource_key IS NULL) = (resource_version IS NULL)),
    CONSTRAINT jobs_running_has_lease CHECK (state <> 'running' OR lease_expires_at IS NOT NULL)
);

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The claim's index: only runnable rows, so finished history never slows it down.
CREATE INDEX jobs_runnable_idx ON jobs (priority DESC, run_after, job_id)
    WHERE state IN ('pending', 'retry_wait');

-- Runnable or blocked work that carries a deadline, for failing it once the deadline passes.
CREATE INDEX jobs_waiting_deadline_idx ON jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('pending', 'retry_wait', 'blocked');

-- The lease rescuer's index: only running rows.
CREATE INDEX jobs_running_lease_idx ON jobs (lease_expires_at) WHERE state = 'running';

CREATE INDEX jobs_tenant_created_idx ON jobs (tenant, created_at DESC, job_id DESC);
CREATE INDEX jobs_tenant_resource_idx ON jobs (tenant, resource_key, resource_version DESC)
    WHERE resource_key IS NOT NULL;

-- The hot table sees an UPDATE per transition: vacuum it early and leave room for HOT updates.
ALTER TABLE jobs SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
                      autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE job_results (
    job_id        uuid PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    payload       bytea NOT NULL,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE job_events (
    event_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    sequence      bigint NOT NULL,
    from_state    job_state,
    to_state      job_state NOT NULL,
    attempt       integer NOT NULL,
    fencing_token bigint NOT NULL,
    actor         text NOT NULL,
    reason        text NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (job_id, sequence)
);

CREATE FUNCTION jobs_bump_sequence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        NEW.sequence := OLD.sequence + 1;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION jobs_record_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor, reason)
    VALUES (NEW.job_id, NEW.tenant, NEW.sequence,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END,
            NEW.state, NEW.attempts, NEW.fencing_token, NEW.transition_actor, NEW.transition_reason);
    -- One wake-up per job for watchers; workers listen on jobs_runnable (statement-level, below).
    PERFORM pg_notify('jobs_changed', NEW.job_id::text || ':' || NEW.sequence::text);
    RETURN NULL;
END $$;

CREATE FUNCTION jobs_notify_runnable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Identical notifications in one transaction are folded into one: one wake-up per batch.
    PERFORM pg_notify('jobs_runnable', '');
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_bump_sequence BEFORE UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_bump_sequence();

CREATE TRIGGER jobs_record_insert AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobs_record_event();

CREATE TRIGGER jobs_record_update AFTER UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.sequence IS DISTINCT FROM NEW.sequence) EXECUTE FUNCTION jobs_record_event();

CREATE TRIGGER jobs_notify_runnable_insert AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_runnable();
