-- The outbox of a service that submits jobs from its own database: run this in THAT database (or call
-- jobs_outbox.create_table(conn)). A row written in the caller's transaction is a submission (or a
-- deletion of a resource key) that exists exactly when the caller's own changes committed;
-- `python -m jobs_outbox.relay` forwards it. Needs PostgreSQL 13 or later (gen_random_uuid).
-- Idempotent: safe to run again, and it brings a table made by an earlier version up to date.
CREATE TABLE IF NOT EXISTS jobs_outbox (
    outbox_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Names the submission for ever: the relay's idempotency key is 'outbox:' || submission_uid unless
    -- the caller gave its own, so a relay that crashed after submitting finds the same job again.
    submission_uid   uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    -- The SubmitJobRequest fields, as jobs.v1 names them.
    kind             text NOT NULL,
    payload          bytea NOT NULL DEFAULT '',
    idempotency_key  text,
    priority         integer NOT NULL DEFAULT 0,
    run_after        timestamptz,
    max_attempts     integer NOT NULL DEFAULT 0,
    deadline         timestamptz,
    resource_key     text,
    resource_version bigint NOT NULL DEFAULT 0,
    labels           jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Set by the relay: when the API accepted the submission, and the job it names.
    sent_at          timestamptz,
    job_id           text,
    -- Set by the relay: refusals that a retry cannot change (an unknown kind, a key reused for another
    -- request, a deleted version) and rows that cannot be sent end in failed_at; transient ones wait
    -- until next_attempt_at.
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    failed_at        timestamptz,
    last_error       text NOT NULL DEFAULT ''
);
-- 'submit' (SubmitJob) or 'delete_resource' (DeleteResource of resource_key, with its reason). A key's
-- rows are sent in outbox_id order, so a deletion follows the versions written before it.
ALTER TABLE jobs_outbox ADD COLUMN IF NOT EXISTS action text NOT NULL DEFAULT 'submit';
ALTER TABLE jobs_outbox ADD COLUMN IF NOT EXISTS reason text NOT NULL DEFAULT '';
-- A deletion has no kind.
ALTER TABLE jobs_outbox ALTER COLUMN kind DROP NOT NULL;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'jobs_outbox'::regclass AND conname = 'jobs_outbox_action_fields') THEN
        ALTER TABLE jobs_outbox ADD CONSTRAINT jobs_outbox_action_fields CHECK (
            (action = 'submit' AND kind IS NOT NULL)
            OR (action = 'delete_resource' AND resource_key IS NOT NULL));
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS jobs_outbox_unsent_idx ON jobs_outbox (next_attempt_at, outbox_id)
    WHERE sent_at IS NULL AND failed_at IS NULL;
-- The relay's per-key order: a row waits while an earlier row of its key is unsent.
CREATE INDEX IF NOT EXISTS jobs_outbox_key_order_idx ON jobs_outbox (resource_key, outbox_id)
    WHERE sent_at IS NULL AND failed_at IS NULL AND resource_key IS NOT NULL;
