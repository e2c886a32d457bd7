-- Sequences, singletons and debounce (docs/SEQUENCES.md): three ways a submission names a key of its
-- tenant's that decides how it runs beside the other jobs with that key.
--
-- A sequence's jobs run one at a time, in the order they were accepted. Only the sequence's head (its
-- first job not yet SUCCEEDED, CANCELLED or SUPERSEDED) can be claimed; the others wait parked on '' (the
-- empty key, which no key's room ever takes back), out of the index the claim walks, so that a long
-- sequence costs the claim nothing. The head's end releases the next in the same transaction
-- (jobs_sequence_release_next); a FAILED or OUTCOME_UNKNOWN head is no end: it halts the sequence until it is
-- retried or cancelled. A job of a sequence that comes back from an end (a retry) waits again behind the
-- head, if there is one (jobs_sequence_rejoin). Submissions and rejoins of one sequence take its advisory
-- lock (jobs_key_lock_id), so they decide one after another, and share-lock the job holding the sequence,
-- so that it cannot end unseen by them (routines/sequences.sql).
ALTER TABLE jobs
    ADD COLUMN sequence_key text,
    -- Acceptance order within the sequence: drawn under the sequence's lock.
    ADD COLUMN sequence_position bigint,
    ADD COLUMN singleton_key text,
    ADD COLUMN debounce_key text,
    -- The latest a debounced job waits: max_wait_seconds after the first submission of its burst.
    ADD COLUMN debounce_max_at timestamptz;

CREATE SEQUENCE jobs_sequence_position_seq AS bigint;

-- The jobs of a sequence that still hold it: its head and the jobs waiting behind it.
CREATE INDEX jobs_sequence_live_idx ON jobs (tenant, sequence_key, sequence_position)
    WHERE sequence_key IS NOT NULL AND state NOT IN ('succeeded', 'cancelled', 'superseded');

-- At most one active job per singleton key: the submission path looks first (under the key's lock), and
-- this index refuses whatever else would make a second (a retry's reopening).
CREATE UNIQUE INDEX jobs_singleton_active_idx ON jobs (tenant, singleton_key)
    WHERE singleton_key IS NOT NULL AND state IN ('pending', 'retry_wait', 'blocked', 'running');

-- The job a debounce key's submissions collapse into: pending and never claimed (a fencing token of 0).
CREATE INDEX jobs_debounce_open_idx ON jobs (tenant, debounce_key)
    WHERE debounce_key IS NOT NULL AND state = 'pending' AND fencing_token = 0;

-- Per statement, so that a batch of completions releases the next jobs of its sequences in one statement.
CREATE TRIGGER jobs_sequence_release AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_sequence_release();

CREATE TRIGGER jobs_sequence_release_deleted AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_sequence_release();

CREATE TRIGGER jobs_sequence_rejoin BEFORE UPDATE OF state ON jobs
    FOR EACH ROW
    WHEN (NEW.sequence_key IS NOT NULL
          AND OLD.state IN ('succeeded', 'cancelled', 'superseded', 'failed', 'outcome_unknown')
          AND NEW.state IN ('pending', 'blocked', 'retry_wait'))
    EXECUTE FUNCTION jobs_sequence_rejoin();

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER SEQUENCE jobs_sequence_position_seq OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_sequence_release() OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_sequence_release_next(text[], text[]) OWNER TO jobs_migrator;
        ALTER FUNCTION jobs_sequence_rejoin() OWNER TO jobs_migrator;
    END IF;
END $$;

GRANT USAGE ON SEQUENCE jobs_sequence_position_seq TO jobs_api;
-- The release runs with the migrator's rights, for the ends the API stores and the ones the workers' sweeps
-- make (a lease that expired on a cancelled job); nobody else calls it.
REVOKE ALL ON FUNCTION jobs_sequence_release_next(text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_sequence_release_next(text[], text[]) TO jobs_api, jobs_worker;
