-- Jobs parked behind a key of their own that has no room: out of the index the claim walks, so that a
-- tenant's throttled, held or bounded backlog costs the other tenants' claims nothing.
--
-- A job whose submission key is full (its own bound `@N` reached, an operator's limit on the scoped key
-- full or out of tokens) or held by a pushback could not start, but stayed in jobs_runnable_idx: every claim
-- of its kind read it again, and 90,000 of them behind `doc@1` made every other tenant's claims 25-50x
-- slower. A claim now parks such a job (`parked_on`, the key it waits for) when it finds the key without
-- room under the key's lock, and the claims take parked jobs back, a key's room at a time, in their queue
-- order, once the key has room again (routines/claim.sql). A parked job is still PENDING or RETRY_WAIT, and
-- still says why it waits.
ALTER TABLE jobs ADD COLUMN parked_on text;

-- The claim's walk: the runnable rows not parked. The parked ones, by the key they wait for, in the order
-- they are taken back.
DROP INDEX jobs_runnable_idx;
CREATE INDEX jobs_runnable_idx ON jobs (kind, tenant, priority DESC, run_after, job_id)
    WHERE state IN ('pending', 'retry_wait') AND parked_on IS NULL;
CREATE INDEX jobs_parked_idx ON jobs (parked_on, priority DESC, run_after, job_id)
    WHERE state IN ('pending', 'retry_wait') AND parked_on IS NOT NULL;

-- What the claim's stages pass each other (routines/claim.sql, where each field is described).
CREATE TYPE jobs_claim_state AS (
    batch integer,
    claimed integer,
    rounds integer,
    done boolean,
    priority integer,
    pair_kinds text[],
    pair_tenants text[],
    pair_priorities integer[],
    declared jsonb,
    tenants text[],
    tenant_running bigint[],
    tenant_weights integer[],
    tenant_ages timestamptz[],
    tenant_live boolean[],
    limited text[],
    keys_locked boolean,
    counted_at timestamptz,
    parts jsonb,
    least_part integer,
    key_running jsonb,
    shared_keys text[],
    charge_shared boolean,
    rated_keys text[],
    shares_of text[],
    share_counts bigint[],
    locked_ids uuid[],
    locked_tenants text[],
    locked_kinds text[],
    locked_keyed boolean,
    chosen_ids uuid[],
    chosen_tenants text[],
    chosen_kinds text[],
    taken jsonb,
    park_ids uuid[],
    park_keys text[]
);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TYPE jobs_claim_state OWNER TO jobs_migrator;
    END IF;
END $$;

-- Claims park and take back jobs; nothing else of a queued job is the worker's to write.
GRANT UPDATE (parked_on) ON jobs TO jobs_worker;
