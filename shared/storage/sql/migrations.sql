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

-- name: routine_table_create
-- The record of the routine files applied, by the checksum of the text applied, created on first use.
CREATE TABLE IF NOT EXISTS schema_routines (
    file text PRIMARY KEY,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: routine_applied_checksums
-- Each routine file's checksum when it was last applied.
SELECT file, checksum FROM schema_routines;

-- name: routine_body_checks_off
-- Routines created without checking their bodies, so that the order they are created in does not matter.
SET LOCAL check_function_bodies = off;

-- name: routine_body_checks_on
-- Routines created with their bodies checked against the schema.
SET LOCAL check_function_bodies = on;

-- name: routine_applied_names
-- Names the routines the next statement hands over, for this transaction only.
SELECT set_config('jobs.routines_applied', %(routines)s, true);

-- name: routine_owner_handover
-- Gives the routines just created to jobs_migrator, as 0007 gave it the schema, when the migrating user may
-- act as it; a routine that existed keeps its owner.
DO $$
DECLARE
    routine regprocedure;
BEGIN
    IF current_user = 'jobs_migrator' OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobs_migrator')
       OR NOT pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        RETURN;
    END IF;
    FOR routine IN
        SELECT p.oid::regprocedure
        FROM pg_proc AS p
        WHERE p.pronamespace = 'public'::regnamespace
          AND p.proowner = (SELECT r.oid FROM pg_roles AS r WHERE r.rolname = current_user)
          AND p.proname = ANY (string_to_array(current_setting('jobs.routines_applied'), ','))
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO jobs_migrator', routine);
    END LOOP;
END $$;

-- name: routine_record
-- Records a routine file as applied with this checksum, in the transaction that applied it.
INSERT INTO schema_routines (file, checksum) VALUES (%(file)s, %(checksum)s)
ON CONFLICT (file) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = clock_timestamp();
