-- Statements of the migrator's own bookkeeping.

-- name: migration_lock
-- Serialises concurrent `migrate` runs (several pods starting at once).
SELECT pg_advisory_lock(%(lock_key)s);

-- name: migration_unlock
-- Lets the next `migrate` run in.
SELECT pg_advisory_unlock(%(lock_key)s);

-- name: migration_table_create
-- The record of applied migrations, created on first use.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: migration_applied_versions
-- The versions already applied.
SELECT version FROM schema_migrations;

-- name: migration_record
-- Records one migration as applied, in the transaction that applied it.
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s);
