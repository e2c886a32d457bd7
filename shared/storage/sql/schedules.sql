-- Statements on schedules and schedule_fires: recurring submissions and what became of each fire.

-- name: schedule_insert
-- Stores a new schedule; returns nothing when the tenant already has one with this id.
INSERT INTO schedules (tenant, schedule_id, cron, time_zone, overlap_policy, catchup_window_seconds, kind,
                       payload, priority, max_attempts, labels, limit_keys, paused, note, next_fire_at, created_by)
VALUES (%(tenant)s, %(schedule_id)s, %(cron)s, %(time_zone)s, %(overlap_policy)s, %(catchup_window_seconds)s,
        %(kind)s, %(payload)s, %(priority)s, %(max_attempts)s, %(labels)s, %(limit_keys)s, %(paused)s, %(note)s,
        %(next_fire_at)s, %(created_by)s)
ON CONFLICT (tenant, schedule_id) DO NOTHING
RETURNING *;

-- name: schedule_get
-- One schedule of the tenant.
SELECT * FROM schedules WHERE tenant = %(tenant)s AND schedule_id = %(schedule_id)s;

-- name: schedule_lock
-- One schedule of the tenant, locked until commit (pause, resume, trigger).
SELECT * FROM schedules WHERE tenant = %(tenant)s AND schedule_id = %(schedule_id)s FOR UPDATE;

-- name: schedule_list
-- A page of the tenant's schedules in id order, after the given id.
SELECT * FROM schedules
WHERE tenant = %(tenant)s AND schedule_id > %(after_id)s
ORDER BY schedule_id
LIMIT %(limit)s;

-- name: schedule_set_paused
-- Pauses or resumes a schedule; a resumed schedule fires next at the given time.
UPDATE schedules
SET paused = %(paused)s, note = %(note)s, next_fire_at = coalesce(%(next_fire_at)s, next_fire_at),
    buffered_fire_at = CASE WHEN %(paused)s THEN buffered_fire_at ELSE NULL END, updated_at = clock_timestamp()
WHERE tenant = %(tenant)s AND schedule_id = %(schedule_id)s
RETURNING *;

-- name: schedule_delete
-- Deletes a schedule and its fire records; the jobs it submitted stay.
DELETE FROM schedules WHERE tenant = %(tenant)s AND schedule_id = %(schedule_id)s RETURNING schedule_id;

-- name: schedule_claim_due
-- Locks due schedules that no other replica holds, fair across tenants as the claim is: among the oldest due (a window of them), in turns of each tenant's oldest (a tenant's weight its share of a turn), so one tenant's backlog of due fires never keeps another's waiting; tenants this replica just saw refused are left out.
SELECT s.*, clock_timestamp() AS claimed_at
FROM (
    SELECT c.schedule_uid, c.next_fire_at,
           row_number() OVER (PARTITION BY c.tenant ORDER BY c.next_fire_at, c.schedule_uid)::float8
               / coalesce(w.weight, 1) AS turn
    FROM (
        SELECT d.schedule_uid, d.tenant, d.next_fire_at
        FROM schedules AS d
        WHERE NOT d.paused AND (d.next_fire_at <= clock_timestamp() OR d.buffered_fire_at IS NOT NULL)
          AND d.tenant <> ALL (%(deferred_tenants)s::text[])
        ORDER BY d.next_fire_at
        LIMIT %(window)s
    ) AS c
    LEFT JOIN tenant_weights AS w ON w.tenant = c.tenant
) AS due
JOIN schedules AS s ON s.schedule_uid = due.schedule_uid
WHERE NOT s.paused AND (s.next_fire_at <= clock_timestamp() OR s.buffered_fire_at IS NOT NULL)
ORDER BY due.turn, due.next_fire_at, s.schedule_uid
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_clock
-- The database's clock, which every fire time is compared with.
SELECT clock_timestamp() AS now;

-- name: schedule_record_step
-- Moves a schedule on after one fire step: its next times, the job a fire submitted, its counters.
UPDATE schedules
SET next_fire_at = %(next_fire_at)s,
    buffered_fire_at = %(buffered_fire_at)s,
    last_fire_at = coalesce(%(fired_at)s, last_fire_at),
    last_job_id = coalesce(%(job_id)s, last_job_id),
    fires_submitted = fires_submitted + %(submitted)s,
    fires_missed = fires_missed + %(missed)s,
    fires_skipped = fires_skipped + %(skipped)s,
    last_error = %(last_error)s,
    updated_at = clock_timestamp()
WHERE schedule_uid = %(schedule_uid)s;

-- name: schedule_fire_record
-- Records what became of one fire; a buffered fire's row becomes its submission's.
INSERT INTO schedule_fires (schedule_uid, fire_at, manual, tenant, outcome, job_id, detail)
VALUES (%(schedule_uid)s, %(fire_at)s, %(manual)s, %(tenant)s, %(outcome)s, %(job_id)s, %(detail)s)
ON CONFLICT (schedule_uid, fire_at, manual) DO UPDATE
    SET outcome = EXCLUDED.outcome, job_id = EXCLUDED.job_id, detail = EXCLUDED.detail,
        recorded_at = clock_timestamp();

-- name: schedule_fires_prune
-- Deletes up to `limit` of the fire records older than `kept_seconds`, oldest first; the jobs stay.
DELETE FROM schedule_fires
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM schedule_fires
    WHERE recorded_at < clock_timestamp() - make_interval(secs => %(kept_seconds)s)
    ORDER BY recorded_at
    LIMIT %(limit)s));
