-- The outbox of a service that submits jobs from its own database: run this in THAT database (or call
-- jobs_outbox.create_table(conn)). A row written in the caller's transaction is a submission that
-- exists exactly when the caller's own changes committed; `python -m jobs_outbox.relay` forwards it.
-- Needs PostgreSQL 13 or later (gen_random_uuid). Idempotent: safe to run again.
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
    -- request) end the row in failed_at; transient ones wait until next_attempt_at.
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    failed_at        timestamptz,
    last_error       text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_outbox_unsent_idx ON jobs_outbox (next_attempt_at, outbox_id)
    WHERE sent_at IS NULL AND failed_at IS NULL;
