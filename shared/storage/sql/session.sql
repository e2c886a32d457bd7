-- Statements that configure a connection or transaction rather than read or write an aggregate.

-- name: session_begin
-- Starts a transaction on a connection that otherwise commits each statement (the pool's connections).
BEGIN;

-- name: session_time_zone_utc
-- Shows the session's timestamps in UTC: each one read is then built with no time zone lookup.
SET TimeZone TO 'UTC';

-- name: session_scope_tenant
-- Confines the rest of the transaction to one tenant's rows (row-level security).
SELECT set_config('jobs.tenant', %(tenant)s, true);

-- name: session_scope_timeout
-- Bounds each later statement of the transaction, and each pause between them, by the time it has left.
SELECT set_config('statement_timeout', %(timeout_ms)s, true),
    set_config('idle_in_transaction_session_timeout', %(timeout_ms)s, true);

-- name: session_scope_tenant_and_timeout
-- Both of the above in one round trip.
SELECT set_config('jobs.tenant', %(tenant)s, true), set_config('statement_timeout', %(timeout_ms)s, true),
    set_config('idle_in_transaction_session_timeout', %(timeout_ms)s, true);

-- name: session_ping
-- Whether the database answers and takes writes (a demoted or fenced primary answers read-only).
SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable;

-- name: session_alive
-- Whether the server answers at all, whatever its role (a check of one server of a multi-host URL).
SELECT 1 AS alive;
