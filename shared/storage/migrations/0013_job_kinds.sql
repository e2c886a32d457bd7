-- The job kinds that worker replicas publish, with the policy the API applies to their submissions.
-- The API imports no user code: what it knows of a kind is what this table says.

CREATE TYPE job_executor AS ENUM ('async', 'thread', 'process');

-- One row per kind: the policy in force. A kind stays known (submissions accepted, waiting visibly) after
-- its last worker stopped, until an operator retires it; a worker publishing it again brings it back.
CREATE TABLE job_kinds (
    kind                  text PRIMARY KEY,
    max_attempts          integer NOT NULL CHECK (max_attempts >= 1),
    backoff_base_seconds  double precision NOT NULL CHECK (backoff_base_seconds >= 0),
    backoff_cap_seconds   double precision NOT NULL CHECK (backoff_cap_seconds >= 0),
    timeout_seconds       double precision CHECK (timeout_seconds > 0),
    external_side_effects boolean NOT NULL,
    limit_keys            text[] NOT NULL DEFAULT '{}',
    executor              job_executor NOT NULL,
    policy_digest         bytea NOT NULL,
    -- The replica whose policy is in force, and when that replica started: the newest start wins, so a
    -- rolling deployment's new policy is not overwritten by the old replicas still refreshing theirs.
    published_by          text NOT NULL,
    publisher_started_at  timestamptz NOT NULL,
    first_published_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_published_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    retired_at            timestamptz,
    retired_by            text
);

-- Every replica's latest publication of each kind: replicas that disagree on a kind's policy show here.
CREATE TABLE job_kind_publishers (
    kind          text NOT NULL,
    publisher     text NOT NULL,
    policy_digest bytea NOT NULL,
    started_at    timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (kind, publisher)
);
CREATE INDEX job_kind_publishers_seen_idx ON job_kind_publishers (last_seen_at);

DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER TABLE job_kinds OWNER TO jobs_migrator;
        ALTER TABLE job_kind_publishers OWNER TO jobs_migrator;
        ALTER TYPE job_executor OWNER TO jobs_migrator;
    END IF;
END $$;

-- Workers publish; the API reads, publishes the built-in kinds it always knows, and retires kinds.
GRANT SELECT, INSERT, UPDATE ON job_kinds, job_kind_publishers TO jobs_worker;
GRANT DELETE ON job_kind_publishers TO jobs_worker;
GRANT SELECT, INSERT, UPDATE ON job_kinds TO jobs_api;
GRANT SELECT ON job_kind_publishers TO jobs_api;
