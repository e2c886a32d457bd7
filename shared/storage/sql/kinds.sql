-- Statements on job_kinds and job_kind_publishers: the kinds workers publish and the policy in force.

-- name: kind_publish
-- Records one replica's publication of its kinds and makes its policy the one in force, unless a replica that started later publishes another.
WITH published AS (
    SELECT *
    FROM jsonb_to_recordset(%(policies)s::jsonb) AS p(
        kind text, max_attempts integer, backoff_base_seconds double precision,
        backoff_cap_seconds double precision, timeout_seconds double precision,
        external_side_effects boolean, limit_keys text[], executor job_executor, policy_digest text)
), seen AS (
    INSERT INTO job_kind_publishers (kind, publisher, policy_digest, started_at)
    SELECT kind, %(publisher)s, decode(policy_digest, 'hex'), %(started_at)s FROM published
    ON CONFLICT (kind, publisher) DO UPDATE
        SET policy_digest = EXCLUDED.policy_digest, started_at = EXCLUDED.started_at,
            last_seen_at = clock_timestamp()
)
INSERT INTO job_kinds AS k (kind, max_attempts, backoff_base_seconds, backoff_cap_seconds, timeout_seconds,
                            external_side_effects, limit_keys, executor, policy_digest, published_by,
                            publisher_started_at)
SELECT kind, max_attempts, backoff_base_seconds, backoff_cap_seconds, timeout_seconds, external_side_effects,
       coalesce(limit_keys, '{}'), executor, decode(policy_digest, 'hex'), %(publisher)s, %(started_at)s
FROM published
ORDER BY kind
ON CONFLICT (kind) DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_base_seconds = EXCLUDED.backoff_base_seconds,
        backoff_cap_seconds = EXCLUDED.backoff_cap_seconds, timeout_seconds = EXCLUDED.timeout_seconds,
        external_side_effects = EXCLUDED.external_side_effects, limit_keys = EXCLUDED.limit_keys,
        executor = EXCLUDED.executor, policy_digest = EXCLUDED.policy_digest,
        published_by = EXCLUDED.published_by, publisher_started_at = EXCLUDED.publisher_started_at,
        last_published_at = clock_timestamp(), retired_at = NULL, retired_by = NULL
    WHERE k.publisher_started_at <= EXCLUDED.publisher_started_at OR k.retired_at IS NOT NULL;

-- name: kind_publish_builtin
-- Makes a built-in kind known before any worker publishes it; a worker's publication, or a retirement, stands.
INSERT INTO job_kinds (kind, max_attempts, backoff_base_seconds, backoff_cap_seconds, timeout_seconds,
                       external_side_effects, limit_keys, executor, policy_digest, published_by,
                       publisher_started_at)
SELECT kind, max_attempts, backoff_base_seconds, backoff_cap_seconds, timeout_seconds, external_side_effects,
       coalesce(limit_keys, '{}'), executor, decode(policy_digest, 'hex'), %(publisher)s, '-infinity'
FROM jsonb_to_recordset(%(policies)s::jsonb) AS p(
    kind text, max_attempts integer, backoff_base_seconds double precision,
    backoff_cap_seconds double precision, timeout_seconds double precision,
    external_side_effects boolean, limit_keys text[], executor job_executor, policy_digest text)
ORDER BY kind
ON CONFLICT (kind) DO NOTHING;

-- name: kind_list_known
-- Every kind that is not retired, with the policy in force.
SELECT kind, max_attempts, backoff_base_seconds, backoff_cap_seconds, timeout_seconds, external_side_effects,
       limit_keys, executor::text AS executor
FROM job_kinds
WHERE retired_at IS NULL
ORDER BY kind;

-- name: kind_policy_conflicts
-- Kinds whose replicas seen within the window publish different policies, with those replicas.
SELECT kind, count(DISTINCT policy_digest) AS policies, array_agg(publisher ORDER BY publisher) AS publishers
FROM job_kind_publishers
WHERE last_seen_at > clock_timestamp() - make_interval(secs => %(within_seconds)s)
GROUP BY kind
HAVING count(DISTINCT policy_digest) > 1
ORDER BY kind;

-- name: kind_publishers_forget
-- Forgets replicas not seen for a while, so a replaced replica's old policy no longer counts as a conflict.
DELETE FROM job_kind_publishers
WHERE last_seen_at < clock_timestamp() - make_interval(secs => %(older_than_seconds)s);

-- name: kind_retire
-- Retires a kind: later submissions of it are refused until a worker publishes it again.
UPDATE job_kinds
SET retired_at = clock_timestamp(), retired_by = %(actor)s
WHERE kind = %(kind)s AND retired_at IS NULL
RETURNING kind;
