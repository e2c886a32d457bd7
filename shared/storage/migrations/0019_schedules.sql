-- Schedules: durable recurring submissions. The API replicas' scheduler loops claim due rows with
-- FOR UPDATE SKIP LOCKED (no leader); every fire submits one job whose idempotency key is derived from
-- the schedule's uid and the fire time, so a fire repeated after a crash finds the same job.
CREATE TABLE schedules (
    tenant                 text NOT NULL,
    schedule_id            text NOT NULL CHECK (length(schedule_id) BETWEEN 1 AND 128),
    -- Names this schedule's fires for ever: a schedule deleted and created again under the same id
    -- never meets the old one's idempotency keys.
    schedule_uid           uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    cron                   text NOT NULL,
    time_zone              text NOT NULL,
    overlap_policy         text NOT NULL CHECK (overlap_policy IN ('skip', 'buffer_one', 'allow')),
    catchup_window_seconds bigint NOT NULL CHECK (catchup_window_seconds > 0),
    -- The job template: what SubmitJobRequest fields a recurring job may set.
    kind                   text NOT NULL,
    payload                bytea NOT NULL DEFAULT '',
    priority               integer NOT NULL DEFAULT 0,
    max_attempts           integer NOT NULL DEFAULT 0,
    labels                 jsonb NOT NULL DEFAULT '{}'::jsonb,
    paused                 boolean NOT NULL DEFAULT false,
    note                   text NOT NULL DEFAULT '',
    -- The next cron fire time not yet handled; due once the database clock passes it.
    next_fire_at           timestamptz NOT NULL,
    -- buffer_one: the one fire waiting for the previous fire's job to end.
    buffered_fire_at       timestamptz,
    last_fire_at           timestamptz,
    last_job_id            uuid,
    fires_submitted        bigint NOT NULL DEFAULT 0,
    fires_missed           bigint NOT NULL DEFAULT 0,
    fires_skipped          bigint NOT NULL DEFAULT 0,
    last_error             text NOT NULL DEFAULT '',
    created_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by             text NOT NULL,
    updated_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, schedule_id)
);
CREATE INDEX schedules_due_idx ON schedules (next_fire_at) WHERE NOT paused;
CREATE INDEX schedules_buffered_idx ON schedules (buffered_fire_at) WHERE buffered_fire_at IS NOT NULL;

-- What became of each fire: one row per schedule and fire time (a manual trigger is its own fire).
-- The primary key is the database's promise of one outcome, and so at most one job, per fire.
CREATE TABLE schedule_fires (
    schedule_uid uuid NOT NULL REFERENCES schedules (schedule_uid) ON DELETE CASCADE,
    fire_at      timestamptz NOT NULL,
    manual       boolean NOT NULL DEFAULT false,
    tenant       text NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('submitted', 'skipped', 'missed', 'buffered', 'refused')),
    job_id       uuid,
    detail       text NOT NULL DEFAULT '',
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (schedule_uid, fire_at, manual)
);
-- Fire records are kept for a while (JOBS_SCHEDULE_FIRES_KEPT_SECONDS), then pruned oldest first.
CREATE INDEX schedule_fires_recorded_idx ON schedule_fires (recorded_at);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE schedules OWNER TO jobs_migrator;
        ALTER TABLE schedule_fires OWNER TO jobs_migrator;
    END IF;
END $$;

-- Only the API reads and writes schedules: it owns submissions, and its scheduler loop fires them.
GRANT SELECT, INSERT, UPDATE, DELETE ON schedules, schedule_fires TO jobs_api;

ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE schedule_fires ENABLE ROW LEVEL SECURITY;
CREATE POLICY schedules_api_tenant ON schedules TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
CREATE POLICY schedule_fires_api_tenant ON schedule_fires TO jobs_api
    USING (jobs_tenant_visible(tenant)) WITH CHECK (jobs_tenant_visible(tenant));
