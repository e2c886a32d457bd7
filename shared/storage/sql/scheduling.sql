-- Statements of the scheduling state: keys a submission adds, provider holds, why a job waits.

-- name: job_set_limit_keys
-- Gives one tenant's just-stored job the keys its submission added (scoped) and their own bounds.
UPDATE jobs
SET limit_keys = %(keys)s::text[], limit_key_bounds = %(bounds)s::integer[]
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid;

-- name: key_hold
-- Holds a key until the given time (a provider's pushback): no job carrying it starts before then.
SELECT jobs_hold_key(%(key)s, %(until)s::timestamptz) AS held_until;

-- name: job_waiting_reason
-- Why one tenant's runnable job is not being claimed (a pause, a hold, a full limit); no row when nothing holds it.
SELECT w.reason, w.key
FROM jobs AS j
CROSS JOIN LATERAL jobs_waiting_reason(j.job_id) AS w
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid;

-- name: job_hold_pushed_key
-- Holds a key a pushed-back job carried (by its full name, or one of the job's own by the name its tenant gave) until the job's next run.
SELECT jobs_hold_key(k.key, j.run_after) AS held_until
FROM jobs AS j
CROSS JOIN LATERAL unnest(j.running_keys) AS k(key)
WHERE j.job_id = %(job_id)s::uuid
  AND (k.key = %(key)s OR k.key = jobs_own_key(j.tenant, %(key)s))
LIMIT 1;

-- name: key_charges_keys
-- The keys with charges made under their shared lock and not yet folded into their buckets.
SELECT DISTINCT c.key FROM job_key_charges AS c ORDER BY c.key;

-- name: key_charges_fold
-- Folds one key's charges into its bucket, under the key's lock held alone; returns the tokens folded.
SELECT jobs_fold_key_charges(%(key)s) AS folded;

-- name: running_tallies_tend
-- Folds the running tallies of exited backends into one row per key and corrects any key whose tally
-- differs from a count of its running rows (jobs_tend_running_tallies); returns the keys corrected.
SELECT jobs_tend_running_tallies() AS corrected;
