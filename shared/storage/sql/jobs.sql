-- Statements on the jobs table. Each block: a name line, a purpose line, one statement.
-- Every statement a tenant caller reaches filters by tenant.

-- name: job_insert
-- Stores one submission in the state the use-case decided; with a reused idempotency key it inserts nothing.
-- A spawned child comes with the id its worker made and its parent's; a submission with neither.
INSERT INTO jobs (job_id, parent_job_id, tenant, kind, state, payload, priority, run_after, deadline, max_attempts,
                  retry_budget, backoff_base_seconds, backoff_cap_seconds, idempotency_key, request_digest, input_digest,
                  resource_key, resource_version, depends_on, labels, finished_at,
                  last_error_category, last_error_message, transition_actor, transition_reason,
                  traceparent, tracestate, waits_for_manual_retry, singleton_key, debounce_key, debounce_max_at)
VALUES (coalesce(%(job_id)s::uuid, jobs_new_job_id()), %(parent_job_id)s::uuid, %(tenant)s, %(kind)s,
        %(state)s::job_state, %(payload)s, %(priority)s,
        -- A debounced job waits for its quiet window (no longer than its longest wait), not before run_after.
        CASE WHEN %(debounce_key)s::text IS NULL THEN coalesce(%(run_after)s::timestamptz, clock_timestamp())
             ELSE greatest(coalesce(%(run_after)s::timestamptz, clock_timestamp()),
                           clock_timestamp() + make_interval(secs => least(%(debounce_quiet_seconds)s::double precision,
                                                                           %(debounce_max_wait_seconds)s::double precision)))
        END,
        %(deadline)s::timestamptz, %(max_attempts)s,
        %(max_attempts)s, %(backoff_base_seconds)s, %(backoff_cap_seconds)s, %(idempotency_key)s,
        %(request_digest)s, %(input_digest)s, %(resource_key)s, %(resource_version)s, %(depends_on)s::uuid[], %(labels)s::jsonb,
        CASE WHEN %(state)s::job_state IN ('failed', 'superseded') THEN clock_timestamp() END,
        %(error_category)s::error_category, %(error_message)s, %(actor)s, %(reason)s,
        %(traceparent)s, %(tracestate)s, %(waits_for_manual_retry)s, %(singleton_key)s, %(debounce_key)s,
        CASE WHEN %(debounce_key)s::text IS NOT NULL
             THEN clock_timestamp() + make_interval(secs => %(debounce_max_wait_seconds)s::double precision) END)
ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
          finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
          resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key;

-- name: job_insert_many
-- Stores many plain submissions (no key, resource or dependencies) of one tenant in one statement; spawned
-- children name their parent.
INSERT INTO jobs (job_id, parent_job_id, tenant, kind, state, payload, priority, run_after, deadline, max_attempts,
                  retry_budget, backoff_base_seconds, backoff_cap_seconds, labels, transition_actor,
                  transition_reason, traceparent, tracestate)
SELECT s.job_id, %(parent_job_id)s::uuid, %(tenant)s, s.kind, 'pending', s.payload, s.priority,
       coalesce(s.run_after, clock_timestamp()),
       s.deadline, s.max_attempts, s.max_attempts, s.backoff_base, s.backoff_cap, coalesce(s.labels, '{}'),
       %(actor)s, 'submitted', s.traceparent, s.tracestate
FROM unnest(%(job_ids)b::uuid[], %(kinds)b::text[], %(payloads)b::bytea[], %(priorities)b::integer[],
            %(run_afters)b::timestamptz[], %(deadlines)b::timestamptz[], %(max_attempts)b::integer[],
            %(backoff_bases)b::double precision[], %(backoff_caps)b::double precision[], %(labels)b::jsonb[],
            %(traceparents)b::text[], %(tracestates)b::text[])
     AS s(job_id, kind, payload, priority, run_after, deadline, max_attempts, backoff_base, backoff_cap, labels,
          traceparent, tracestate)
-- Only what the database decides comes back: the rest of each new row is the submission itself.
RETURNING job_id, created_at, run_after, sequence;

-- name: job_insert_many_ids
-- Stores many plain submissions of one tenant in one statement, as job_insert_many, reading nothing back.
INSERT INTO jobs (job_id, parent_job_id, tenant, kind, state, payload, priority, run_after, deadline, max_attempts,
                  retry_budget, backoff_base_seconds, backoff_cap_seconds, labels, transition_actor,
                  transition_reason, traceparent, tracestate)
SELECT s.job_id, %(parent_job_id)s::uuid, %(tenant)s, s.kind, 'pending', s.payload, s.priority,
       coalesce(s.run_after, clock_timestamp()),
       s.deadline, s.max_attempts, s.max_attempts, s.backoff_base, s.backoff_cap, coalesce(s.labels, '{}'),
       %(actor)s, 'submitted', s.traceparent, s.tracestate
FROM unnest(%(job_ids)b::uuid[], %(kinds)b::text[], %(payloads)b::bytea[], %(priorities)b::integer[],
            %(run_afters)b::timestamptz[], %(deadlines)b::timestamptz[], %(max_attempts)b::integer[],
            %(backoff_bases)b::double precision[], %(backoff_caps)b::double precision[], %(labels)b::jsonb[],
            %(traceparents)b::text[], %(tracestates)b::text[])
     AS s(job_id, kind, payload, priority, run_after, deadline, max_attempts, backoff_base, backoff_cap, labels,
          traceparent, tracestate);

-- name: job_dependency_states
-- The states of the named jobs of one tenant, locked so none can end unseen before this transaction commits.
SELECT job_id, state
FROM jobs
WHERE tenant = %(tenant)s AND job_id = ANY (%(job_ids)s::uuid[])
FOR SHARE;

-- name: resource_head_lock
-- Creates the resource key's head if new and locks it: submissions of one key run one at a time.
INSERT INTO resource_heads (tenant, resource_key, latest_version)
VALUES (%(tenant)s, %(resource_key)s, 0)
ON CONFLICT (tenant, resource_key) DO UPDATE SET latest_version = resource_heads.latest_version
RETURNING latest_version, deleted_version;

-- name: resource_head_advance
-- Records a higher version as the resource key's latest.
UPDATE resource_heads
SET latest_version = %(resource_version)s, updated_at = clock_timestamp()
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s AND latest_version < %(resource_version)s;

-- name: job_supersede_older
-- Ends the unfinished jobs of lower versions of a resource; a running one learns it at its next heartbeat.
UPDATE jobs
SET state = 'superseded', finished_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL,
    transition_actor = %(actor)s, transition_reason = 'superseded by version ' || %(resource_version)s
WHERE tenant = %(tenant)s AND resource_key = %(resource_key)s AND resource_version < %(resource_version)s
  AND state IN ('pending', 'blocked', 'retry_wait', 'running')
RETURNING job_id;

-- name: job_key_lock
-- Holds one of the tenant's sequence, singleton or debounce keys until commit: its submissions decide one
-- after another (the sequence's releases and rejoins take the same lock).
SELECT pg_advisory_xact_lock(jobs_key_lock_id(%(what)s, %(tenant)s, %(key)s));

-- name: job_sequence_hold
-- Whether a job of one of the tenant's sequences still holds it, share-locking the first such job until commit
-- so that it cannot end unseen by a job joining the sequence. Taken under the sequence's lock.
SELECT jobs_sequence_hold(%(tenant)s, %(sequence_key)s, %(job_id)s::uuid, false) AS held;

-- name: job_sequence_join
-- Puts one tenant's just-stored job last in its sequence: waiting (parked on '') while an earlier job holds
-- the sequence, its head otherwise.
UPDATE jobs AS n
SET sequence_key = %(sequence_key)s,
    sequence_position = nextval('jobs_sequence_position_seq'),
    parked_on = CASE WHEN %(held)s AND n.state IN ('pending', 'blocked', 'retry_wait') THEN '' END
WHERE n.tenant = %(tenant)s AND n.job_id = %(job_id)s::uuid;

-- name: job_singleton_active
-- One tenant's active job (pending, retry wait, blocked or running) with this singleton key, if any.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels,
       sequence_key, singleton_key, debounce_key
FROM jobs
WHERE tenant = %(tenant)s AND singleton_key = %(singleton_key)s
  AND state IN ('pending', 'retry_wait', 'blocked', 'running');

-- name: job_debounce_collapse
-- Gives one tenant's open debounced job (pending, never claimed) the latest payload and a new quiet window,
-- no later than its longest wait. A job a claim took meanwhile is passed over (the lock's recheck).
UPDATE jobs AS j
SET payload = %(payload)s,
    run_after = greatest(j.run_after, least(clock_timestamp() + make_interval(secs => %(quiet_seconds)s::double precision),
                                            j.debounce_max_at))
WHERE j.job_id = (SELECT o.job_id FROM jobs AS o
                  WHERE o.tenant = %(tenant)s AND o.debounce_key = %(debounce_key)s
                    AND o.state = 'pending' AND o.fencing_token = 0
                  ORDER BY o.created_at
                  LIMIT 1)
  AND j.state = 'pending' AND j.fencing_token = 0
RETURNING job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
          finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
          resource_version, sequence, fencing_token, idempotency_key, depends_on, labels,
          sequence_key, singleton_key, debounce_key;

-- name: job_get_by_idempotency_key
-- The job an earlier submission with this key created, with the digest of that request.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key, request_digest
FROM jobs
WHERE tenant = %(tenant)s AND idempotency_key = %(idempotency_key)s;

-- name: job_input_lock
-- Serialises the submissions of one input (tenant, kind, payload, resource version) until commit.
SELECT pg_advisory_xact_lock(%(lock_key)s);

-- name: job_find_attachable
-- The job an identical submission asking for de-duplication attaches to: one still waiting or running,
-- else the newest that succeeded within the window. Reads jobs_dedupe_input_idx only.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key
FROM jobs
WHERE tenant = %(tenant)s AND kind = %(kind)s AND input_digest = %(input_digest)s
  AND state IN ('pending', 'blocked', 'retry_wait', 'running', 'succeeded')
  AND coalesce(finished_at, 'infinity') >= statement_timestamp() - make_interval(secs => %(window_seconds)s)
  AND resource_key IS NOT DISTINCT FROM %(resource_key)s::text
  AND resource_version IS NOT DISTINCT FROM %(resource_version)s::bigint
  AND NOT cancel_requested
ORDER BY coalesce(finished_at, 'infinity') DESC
LIMIT 1;

-- name: job_get
-- One job of one tenant; no row when it is absent or another tenant's.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key
FROM jobs
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid;

-- name: job_list
-- A page of one tenant's jobs, newest first, after the cursor; fetches one extra row to detect more.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key
FROM jobs
WHERE tenant = %(tenant)s
  AND (cardinality(%(states)s::job_state[]) = 0 OR state = ANY (%(states)s::job_state[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(resource_key)s::text IS NULL OR resource_key = %(resource_key)s::text)
  AND labels @> %(labels)s::jsonb
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (created_at, job_id) < (%(after_created_at)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT %(limit)s;

-- name: job_list_children
-- A page of the jobs one job of one tenant spawned, newest first, after the cursor (jobs_parent_idx);
-- fetches one extra row to detect more. The other filters apply as in job_list.
SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
       finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
       resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key
FROM jobs
WHERE parent_job_id = %(parent_job_id)s::uuid AND tenant = %(tenant)s
  AND (cardinality(%(states)s::job_state[]) = 0 OR state = ANY (%(states)s::job_state[]))
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(resource_key)s::text IS NULL OR resource_key = %(resource_key)s::text)
  AND labels @> %(labels)s::jsonb
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (created_at, job_id) < (%(after_created_at)s::timestamptz, %(after_job_id)s::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT %(limit)s;

-- name: job_list_sequence
-- A page of the jobs still holding one tenant's sequence, in its order, after the cursor: its head (the job
-- not waiting on '', at most one), then the jobs waiting behind it in acceptance order (a retried job, which
-- waits behind the head, before the ones accepted after it: as jobs_sequence_release_next takes them).
-- Each branch walks jobs_sequence_live_idx in position order; fetches one extra row to detect more. The
-- other filters apply as in job_list. Also the console's view of a job's sequence.
WITH live AS NOT MATERIALIZED (
    SELECT job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
           finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
           resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
           sequence_key, singleton_key, debounce_key,
           parked_on IS NOT DISTINCT FROM '' AS waiting, sequence_position
    FROM jobs
    WHERE tenant = %(tenant)s AND sequence_key = %(sequence_key)s
      AND state NOT IN ('succeeded', 'cancelled', 'superseded')
      AND (cardinality(%(states)s::job_state[]) = 0 OR state = ANY (%(states)s::job_state[]))
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
      AND (%(resource_key)s::text IS NULL OR resource_key = %(resource_key)s::text)
      AND labels @> %(labels)s::jsonb
)
SELECT page.*
FROM ((SELECT * FROM live
       WHERE NOT waiting
         AND (%(after_waiting)s::boolean IS NULL
              OR (NOT %(after_waiting)s::boolean AND sequence_position > %(after_position)s::bigint))
       ORDER BY sequence_position
       LIMIT 1)
      UNION ALL
      (SELECT * FROM live
       WHERE waiting
         AND (%(after_waiting)s::boolean IS NULL OR NOT %(after_waiting)s::boolean
              OR sequence_position > %(after_position)s::bigint)
       ORDER BY sequence_position
       LIMIT %(limit)s)) AS page
ORDER BY page.waiting, page.sequence_position
LIMIT %(limit)s;

-- name: job_claim_batch
-- Claims up to `limit` runnable jobs of the given kinds under new leases, raising each fencing token, in
-- fair order (priority, tenant share, age); paused kinds and full keys are passed over (jobs_claim in
-- routines/claim.sql, docs/SCHEDULING.md).
-- Ids come as text, the form the worker keeps them in (a uuid would be parsed into an object, then printed).
SELECT job_id::text AS job_id, tenant, kind, payload, attempts, max_attempts, fencing_token, lease_expires_at,
       created_at, queued_since, claimed_at, traceparent, tracestate
FROM jobs_claim(%(worker_id)s, %(kinds)s, %(limit)s, %(lease_seconds)s);

-- name: job_lock_expired_leases
-- Locks up to `limit` running jobs whose lease ran out, oldest first, skipping rows another sweep holds and
-- the ones this sweep was refused for lately (`passed_over`), so that those cannot hold up the rest.
SELECT job_id
FROM jobs
WHERE state = 'running' AND lease_expires_at < clock_timestamp()
  AND job_id <> ALL (%(passed_over)s::uuid[])
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_rescue_expired
-- Ends the named jobs' expired leases as jobs_next_state_after_failure decides (a retry after a backoff,
-- or FAILED / CANCELLED / OUTCOME_UNKNOWN). Run after job_lock_expired_leases in one transaction: this
-- statement's snapshot is taken with the rows already locked, so it sees every cancel and receipt
-- committed before the lock.
WITH expired AS (
    SELECT job_id, cancel_requested, attempts, max_attempts, deadline, backoff_base_seconds,
           backoff_cap_seconds
    FROM jobs
    WHERE job_id = ANY (%(job_ids)s::uuid[]) AND state = 'running' AND lease_expires_at < clock_timestamp()
    FOR UPDATE
), timed AS (
    SELECT e.job_id, e.cancel_requested, e.attempts, e.max_attempts, e.deadline,
           clock_timestamp() + jobs_retry_backoff(e.attempts, e.backoff_base_seconds, e.backoff_cap_seconds)
               AS retry_at,
           -- Read after the row is locked, not from this statement's snapshot (see the function).
           job_unconfirmed_step(e.job_id, e.attempts) AS unconfirmed_step
    FROM expired AS e
), classified AS (
    -- A lease that ran out is a retryable failure, unless the attempt made an external call it never confirmed.
    SELECT t.*, CASE WHEN t.unconfirmed_step IS NULL THEN 'retryable'
                     ELSE 'outcome_unknown' END::error_category AS category
    FROM timed AS t
), decided AS (
    SELECT c.job_id, c.retry_at, c.unconfirmed_step, c.category, d.next_state, d.cause
    FROM classified AS c
    CROSS JOIN LATERAL jobs_next_state_after_failure(c.category, c.cancel_requested, c.attempts, c.max_attempts,
                                                     c.deadline, c.retry_at, 'retry_wait') AS d
)
UPDATE jobs AS j
SET state = d.next_state,
    run_after = CASE WHEN d.next_state = 'retry_wait' THEN d.retry_at ELSE j.run_after END,
    finished_at = CASE WHEN d.next_state IN ('cancelled', 'failed') THEN clock_timestamp() END,
    last_error_category = d.category,
    last_error_message = CASE d.cause
        WHEN 'cancel_requested' THEN 'cancelled; the lease expired before the worker confirmed'
        WHEN 'outcome_unknown'
            THEN 'lease expired after an unconfirmed external call (step ' || d.unconfirmed_step || ')'
        WHEN 'attempts_exhausted' THEN 'lease expired on the final attempt'
        WHEN 'deadline' THEN 'deadline'
        ELSE 'lease expired' END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    transition_actor = 'system',
    transition_reason = 'lease expired'
FROM decided AS d
WHERE j.job_id = d.job_id
RETURNING j.job_id, j.tenant, j.kind, j.state, j.attempts, j.fencing_token;

-- name: job_lock_past_deadline
-- Locks up to `limit` waiting jobs whose total deadline passed, skipping rows another sweep holds and the
-- ones this sweep was refused for lately (`passed_over`).
SELECT job_id
FROM jobs
WHERE deadline IS NOT NULL AND deadline <= clock_timestamp()
  AND state IN ('pending', 'retry_wait', 'blocked')
  AND job_id <> ALL (%(passed_over)s::uuid[])
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_fail_past_deadline
-- Fails the named waiting jobs whose total deadline passed before another attempt could start.
UPDATE jobs
SET state = 'failed', finished_at = clock_timestamp(),
    last_error_category = 'permanent', last_error_message = 'deadline',
    transition_actor = 'system', transition_reason = 'deadline'
WHERE job_id = ANY (%(job_ids)s::uuid[])
  AND deadline IS NOT NULL AND deadline <= clock_timestamp()
  AND state IN ('pending', 'retry_wait', 'blocked')
RETURNING job_id, tenant, kind, state, attempts, fencing_token;

-- name: job_heartbeat_batch
-- Extends every lease still held (same token, still running); rows not returned are no longer held.
-- Rows are locked in job-id order, like the completion batch, so the two cannot deadlock.
WITH held AS (
    SELECT j.job_id
    FROM jobs AS j
    JOIN unnest(%(job_ids)b::uuid[], %(fencing_tokens)b::bigint[]) AS l(job_id, fencing_token)
      ON j.job_id = l.job_id AND j.fencing_token = l.fencing_token
    -- As text, so no partial index matches: rows are found by their key (see job_complete_batch).
    WHERE j.state::text = 'running'
    ORDER BY j.job_id
    FOR UPDATE OF j
)
UPDATE jobs AS j
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s)
FROM held AS h
WHERE j.job_id = h.job_id
RETURNING j.job_id::text AS job_id, j.fencing_token, j.cancel_requested, j.lease_expires_at;

-- name: job_lease_diagnose
-- Why reports were refused: the current state and token of each named job, and whether its version was deleted.
SELECT j.job_id, j.state, j.fencing_token, j.cancel_requested,
       EXISTS (SELECT 1 FROM resource_heads AS h
               WHERE h.tenant = j.tenant AND h.resource_key = j.resource_key
                 AND h.deleted_version >= j.resource_version) AS resource_deleted
FROM jobs AS j
WHERE j.job_id = ANY (%(job_ids)s::uuid[]);

-- name: job_complete_batch
-- Fenced completion of many jobs: SUCCEEDED with its result, or CANCELLED when a cancel was requested.
-- A job whose resource version has a tombstone is refused like a stale lease: the deletion cancels such
-- jobs in the transaction that writes the tombstone, so a completion waiting on the row lock re-reads it.
WITH reported AS (
    -- The arrays are read through subqueries so that no plan sees their length: a custom plan (psycopg
    -- prepares a statement at its sixth run on a connection; the plan cache tries five custom plans) then
    -- costs what the generic one does, and the cache keeps the generic one. Read directly, the arrays of a
    -- connection's small batches made custom plans look cheaper than the generic, and every later call was
    -- planned again: 250 of a 750 us completion of one job.
    SELECT *
    FROM unnest((SELECT %(job_ids)b::uuid[]), (SELECT %(fencing_tokens)b::bigint[]), (SELECT %(results)b::bytea[]))
         AS r(job_id, fencing_token, result)
), locked AS (
    -- In job-id order, like the heartbeat batch, so the two cannot deadlock.
    SELECT j.job_id, r.result
    FROM jobs AS j
    JOIN reported AS r ON j.job_id = r.job_id AND j.fencing_token = r.fencing_token
    -- The state is compared as text, which no partial index's predicate matches, so the rows are found by
    -- their key: on statistics taken while nothing ran (a quiet night's VACUUM ANALYZE) the planner read
    -- every running job through jobs_running_lease_idx and compared it with every reported one, 2.4
    -- million comparisons for a batch of 1,000.
    WHERE j.state::text = 'running'
      -- Only a job with a resource version can have a tombstone: the others skip the lookup.
      AND (j.resource_key IS NULL
           OR NOT EXISTS (SELECT 1 FROM resource_heads AS h
                          WHERE h.tenant = j.tenant AND h.resource_key = j.resource_key
                            AND h.deleted_version >= j.resource_version))
    ORDER BY j.job_id
    FOR UPDATE OF j
), finished AS (
    UPDATE jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'succeeded' END::job_state,
        -- Always a transition (from running): raised here rather than by the row trigger (migration 0023).
        sequence = j.sequence + 1,
        finished_at = clock_timestamp(),
        lease_owner = NULL,
        lease_expires_at = NULL,
        transition_actor = 'worker:' || %(worker_id)s,
        transition_reason = CASE WHEN j.cancel_requested THEN 'cancelled; result discarded'
                                 ELSE 'completed' END
    FROM locked AS r
    WHERE j.job_id = r.job_id
    RETURNING j.job_id, j.tenant, j.state, j.attempts, j.fencing_token, r.result
), stored AS (
    INSERT INTO job_results (job_id, tenant, payload, attempt, fencing_token)
    SELECT job_id, tenant, result, attempts, fencing_token
    FROM finished
    WHERE state = 'succeeded'
    RETURNING job_id
)
SELECT f.job_id::text AS job_id, f.state, f.tenant, f.attempts, f.fencing_token
FROM finished AS f;

-- name: job_fail
-- Fenced failure of one attempt, as jobs_next_state_after_failure decides: RETRY_WAIT after a backoff (or
-- the handler's retry hint), or
-- FAILED / OUTCOME_UNKNOWN / CANCELLED. The decision reads the row as locked by FOR UPDATE: a cancel
-- request committed while this statement waited for the lock is in that version, not in the statement's
-- snapshot of the table.
WITH current AS (
    -- The handler's retry hint, when it gave one, stands in for the computed backoff.
    SELECT job_id, cancel_requested, attempts, max_attempts, deadline,
           clock_timestamp() + coalesce(make_interval(secs => %(retry_after_seconds)s::double precision),
                                        jobs_retry_backoff(attempts, backoff_base_seconds, backoff_cap_seconds))
               AS retry_at
    FROM jobs
    WHERE job_id = %(job_id)s::uuid AND fencing_token = %(fencing_token)s AND state = 'running'
    FOR UPDATE
), decided AS (
    SELECT c.job_id, c.retry_at, d.next_state, d.cause
    FROM current AS c
    CROSS JOIN LATERAL jobs_next_state_after_failure(%(category)s::error_category, c.cancel_requested, c.attempts,
                                                     c.max_attempts, c.deadline, c.retry_at, 'retry_wait') AS d
)
UPDATE jobs AS j
SET state = d.next_state,
    run_after = CASE WHEN d.next_state = 'retry_wait' THEN d.retry_at ELSE j.run_after END,
    finished_at = CASE WHEN d.next_state IN ('failed', 'cancelled') THEN clock_timestamp() END,
    last_error_category = %(category)s::error_category,
    last_error_message = CASE WHEN d.cause = 'deadline' THEN 'deadline: ' || %(message)s ELSE %(message)s END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    transition_actor = 'worker:' || %(worker_id)s,
    transition_reason = CASE WHEN d.next_state = 'cancelled' THEN 'cancelled' ELSE 'attempt failed' END
FROM decided AS d
WHERE j.job_id = d.job_id
RETURNING j.job_id, j.tenant, j.kind, j.state, j.run_after, j.attempts, j.fencing_token;

-- name: job_release
-- Fenced hand-back of a claimed job, as jobs_next_state_after_failure decides with no backoff; an attempt
-- whose handler never started (and recorded no receipt) is not counted, and one interrupted after an
-- unconfirmed external call needs a decision.
WITH current AS (
    SELECT j.job_id, j.cancel_requested, j.attempts, j.max_attempts,
           %(started)s OR EXISTS (
               SELECT 1 FROM job_receipts AS r WHERE r.job_id = j.job_id AND r.attempt = j.attempts) AS counted,
           EXISTS (
               SELECT 1 FROM job_receipts AS r
               WHERE r.job_id = j.job_id AND r.attempt = j.attempts AND r.confirmed_at IS NULL) AS unconfirmed
    FROM jobs AS j
    WHERE j.job_id = %(job_id)s::uuid AND j.fencing_token = %(fencing_token)s AND j.state = 'running'
    FOR UPDATE
), decided AS (
    -- An unconfirmed receipt of this attempt makes it counted. The job waits as PENDING, ready at once; its
    -- deadline is left to the deadline sweep, as for any waiting job.
    SELECT c.job_id, c.counted, d.next_state, d.cause
    FROM current AS c
    CROSS JOIN LATERAL jobs_next_state_after_failure(
        CASE WHEN c.unconfirmed THEN 'outcome_unknown' ELSE 'retryable' END::error_category, c.cancel_requested,
        CASE WHEN c.counted THEN c.attempts ELSE c.attempts - 1 END, c.max_attempts,
        NULL, clock_timestamp(), 'pending') AS d
)
UPDATE jobs AS j
SET state = c.next_state,
    attempts = CASE WHEN c.counted THEN j.attempts ELSE j.attempts - 1 END,
    run_after = clock_timestamp(),
    finished_at = CASE WHEN c.next_state IN ('cancelled', 'failed') THEN clock_timestamp() END,
    last_error_category = CASE c.cause
        WHEN 'outcome_unknown' THEN 'outcome_unknown'::error_category
        WHEN 'attempts_exhausted' THEN 'retryable'::error_category
        ELSE j.last_error_category END,
    last_error_message = CASE c.cause
        WHEN 'outcome_unknown' THEN 'interrupted after an unconfirmed external call: ' || %(reason)s
        WHEN 'attempts_exhausted' THEN 'interrupted on the final attempt: ' || %(reason)s
        ELSE j.last_error_message END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    transition_actor = 'worker:' || %(worker_id)s,
    -- A cancel ends the job as job_fail ends it: the history says `cancelled`, whichever report ended it.
    transition_reason = CASE WHEN c.next_state = 'cancelled' THEN 'cancelled' ELSE 'released: ' || %(reason)s END
FROM decided AS c
WHERE j.job_id = c.job_id
RETURNING j.job_id, j.tenant, j.kind, j.state, j.attempts, j.fencing_token;

-- name: job_push_back
-- Fenced end of an attempt whose provider pushed back: the job waits as PENDING until retry_at and the
-- attempt is not counted, unless it recorded a receipt (its number must stay unique for the receipts) or
-- the job used up its uncounted pushbacks; the deadline and a cancel request apply as after any failure.
WITH current AS (
    SELECT j.job_id, j.cancel_requested, j.attempts, j.max_attempts, j.deadline,
           clock_timestamp() + make_interval(secs => %(retry_after_seconds)s::double precision) AS retry_at,
           EXISTS (SELECT 1 FROM job_receipts AS r WHERE r.job_id = j.job_id AND r.attempt = j.attempts)
           OR (SELECT count(*) FROM job_events AS e
               WHERE e.job_id = j.job_id AND e.reason LIKE 'pushed back until %%') >= %(uncounted_max)s
               AS counted
    FROM jobs AS j
    WHERE j.job_id = %(job_id)s::uuid AND j.fencing_token = %(fencing_token)s AND j.state = 'running'
    FOR UPDATE OF j
), decided AS (
    SELECT c.job_id, c.counted, c.retry_at, d.next_state, d.cause
    FROM current AS c
    CROSS JOIN LATERAL jobs_next_state_after_failure(
        'retryable', c.cancel_requested, CASE WHEN c.counted THEN c.attempts ELSE c.attempts - 1 END,
        c.max_attempts, c.deadline, c.retry_at, 'pending') AS d
)
UPDATE jobs AS j
SET state = d.next_state,
    attempts = CASE WHEN d.counted THEN j.attempts ELSE j.attempts - 1 END,
    run_after = CASE WHEN d.next_state = 'pending' THEN d.retry_at ELSE j.run_after END,
    finished_at = CASE WHEN d.next_state IN ('failed', 'cancelled') THEN clock_timestamp() END,
    last_error_category = CASE WHEN d.next_state = 'failed' THEN 'retryable'::error_category
                               ELSE j.last_error_category END,
    last_error_message = CASE d.cause
        WHEN 'deadline' THEN 'deadline: pushed back past it: ' || %(message)s
        WHEN 'attempts_exhausted' THEN 'pushed back on the final attempt: ' || %(message)s
        ELSE j.last_error_message END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    transition_actor = 'worker:' || %(worker_id)s,
    transition_reason = CASE
        WHEN d.next_state = 'cancelled' THEN 'cancelled'
        WHEN d.next_state = 'failed' THEN 'attempt failed'
        ELSE 'pushed back until '
             || to_char(d.retry_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
             || CASE WHEN %(limit_key)s::text IS NULL THEN '' ELSE ' (key ' || %(limit_key)s::text || ')' END
             || CASE WHEN d.counted THEN '; counted as an attempt' ELSE '' END
             || CASE WHEN %(message)s = '' THEN '' ELSE ': ' || %(message)s END
    END
FROM decided AS d
WHERE j.job_id = d.job_id
RETURNING j.job_id, j.tenant, j.kind, j.state, j.run_after, j.attempts, j.fencing_token;

-- name: job_cancel
-- Cancels one tenant's unfinished job: at once unless running, where it asks the worker to stop. A FAILED
-- job of a sequence, which halts it, can be cancelled too: the sequence goes on past it.
UPDATE jobs
SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    cancel_requested = true,
    finished_at = CASE WHEN state = 'running' THEN finished_at ELSE clock_timestamp() END,
    transition_actor = %(actor)s,
    transition_reason = CASE WHEN state = 'running' THEN 'cancel requested' ELSE 'cancelled' END
                        || CASE WHEN %(reason)s = '' THEN '' ELSE ': ' || %(reason)s END
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid
  AND (state IN ('pending', 'blocked', 'retry_wait', 'running', 'outcome_unknown')
       OR (state = 'failed' AND sequence_key IS NOT NULL))
RETURNING job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
          finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
          resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key;

-- name: resource_head_lock_for_retry
-- Locks the resource head of one tenant's job, before the job row as a submission of that key does, so a
-- retry and a newer version's submission run one after the other; no row for a job without a resource.
SELECT h.latest_version, h.deleted_version
FROM resource_heads AS h
JOIN jobs AS j ON j.tenant = h.tenant AND j.resource_key = h.resource_key
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid
FOR UPDATE OF h;

-- name: job_lock_for_retry
-- One tenant's job with what a manual retry must check, locked until the retry commits. Its latest
-- attempt's outcome is unknown when that attempt was classed so (whatever state it ended in, a cancel
-- included) or left an external call unconfirmed, until a retry accepted that risk.
SELECT j.job_id, j.state, j.resource_key, j.resource_version, j.depends_on, j.singleton_key,
       j.state = 'outcome_unknown'
       OR ((j.last_error_category = 'outcome_unknown'
            OR EXISTS (SELECT 1 FROM job_receipts AS r
                       WHERE r.job_id = j.job_id AND r.attempt = j.attempts AND r.confirmed_at IS NULL))
           AND j.attempts > coalesce(j.duplicate_risk_accepted_attempt, -1)) AS duplicate_risk
FROM jobs AS j
WHERE j.tenant = %(tenant)s AND j.job_id = %(job_id)s::uuid
FOR UPDATE;

-- name: job_retry
-- Reopens a FAILED, CANCELLED or OUTCOME_UNKNOWN job with a fresh attempt budget; the token keeps rising.
-- An accepted duplicate risk is remembered for the attempt it covered: no later retry asks for it again
-- until another attempt has run.
UPDATE jobs
SET state = %(next_state)s::job_state,
    max_attempts = attempts + retry_budget,
    run_after = clock_timestamp(),
    finished_at = NULL,
    cancel_requested = false,
    -- A job cancelled while parked behind a key waits for it again only if a claim finds it without room.
    parked_on = NULL,
    deadline = CASE WHEN deadline <= clock_timestamp() THEN NULL ELSE deadline END,
    duplicate_risk_accepted_attempt = CASE WHEN %(duplicate_risk_accepted)s THEN attempts
                                           ELSE duplicate_risk_accepted_attempt END,
    transition_actor = %(actor)s,
    transition_reason = %(reason)s
WHERE tenant = %(tenant)s AND job_id = %(job_id)s::uuid AND state = %(expected_state)s::job_state
RETURNING job_id, tenant, kind, state, attempts, max_attempts, priority, created_at, run_after, started_at,
          finished_at, deadline, last_error_category, last_error_message, cancel_requested, resource_key,
          resource_version, sequence, fencing_token, idempotency_key, depends_on, labels, parent_job_id,
       sequence_key, singleton_key, debounce_key;

-- name: job_count_queued
-- How many of one tenant's jobs wait to run (pending, retry wait, blocked), counting no further than the cap.
SELECT count(*) AS queued
FROM (
    SELECT 1
    FROM jobs
    WHERE tenant = %(tenant)s AND state IN ('pending', 'retry_wait', 'blocked')
    LIMIT %(up_to)s
) AS waiting;
