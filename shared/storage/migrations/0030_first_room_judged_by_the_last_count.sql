-- The claim's first judgment of its keys' room (0026's floor) from what the session's last claim counted.
-- The judgment only chooses how a claim locks each key of its limits. A key locked shared is taken by the
-- part of its room, counted after the lock, that every claim could take at once; so a key judged to have
-- more room than it has is claimed less, never more, and taking a key alone is always safe. The floor
-- counted every running job and read every bucket at every claim under limits, and the count under the
-- locks, a moment before in the same session, knew as much to within that moment's claims. Now that
-- count is remembered for the session (a setting, with its time), less the part the claim that made it
-- may take, and the next claim judges by it when it is younger than a second and has every key, by the
-- floor otherwise. What a claim may take is decided as before. A limit lowered within that second can
-- have the next claim lock its key shared and take its part of what is left instead of all of it, once.
-- The floor's two statements were 0.21 ms of a claim's 7.8 ms with four claimers busy; the drain of four
-- tenants under limits gained 5% and 2% in two runs of eight alternating pairs (medians of each side).

-- Keeps the rooms a claim counted under its locks for the session's next judgment (a setting that
-- lasts the session), less what that claim may take of a key it holds shared (its part: the room
-- divided by max_connections), so that a key crossing that bound is judged short at the next claim.
-- In PL/pgSQL, planned once per session: as SQL, not inlined, it was planned at every call.
CREATE FUNCTION jobs_claim_rooms_remember(rooms jsonb, at timestamptz) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    holders integer := current_setting('max_connections')::integer;
BEGIN
    PERFORM set_config('jobs.claim_rooms',
                       jsonb_build_object('at', extract(epoch FROM at),
                                          'rooms', (SELECT coalesce(jsonb_object_agg(r.key, r.value::bigint
                                                                                         - r.value::bigint / holders),
                                                                    '{}')
                                                    FROM jsonb_each_text(rooms) AS r))::text,
                       false);
END
$$;

-- 0029's exact count, remembering what it found.
CREATE OR REPLACE FUNCTION jobs_claim_room(keys text[], at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    rooms jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job_limits AS l WHERE l.key = ANY (keys) AND l.max_running > 0) THEN
        SELECT coalesce(jsonb_object_agg(l.key, greatest(0,
                   floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)))), '{}')
        INTO rooms
        FROM job_limits AS l
        LEFT JOIN job_key_state AS s ON s.key = l.key
        WHERE l.key = ANY (keys) AND l.rate_per_second > 0;
        PERFORM jobs_claim_rooms_remember(rooms, at);
        RETURN rooms;
    END IF;
    WITH held AS (
        SELECT j.kind, j.tenant, j.running_keys[3:] AS extra, count(*) AS n
        FROM jobs AS j
        WHERE j.state = 'running'
        GROUP BY j.kind, j.tenant, j.running_keys[3:]
    ), running AS (
        SELECT k.key, sum(k.n) AS n
        FROM (SELECT 'kind:' || h.kind AS key, h.n FROM held AS h
              UNION ALL
              SELECT 'tenant:' || h.tenant, h.n FROM held AS h
              UNION ALL
              SELECT e.key, h.n FROM held AS h, unnest(h.extra) AS e(key)) AS k
        WHERE k.key = ANY (keys)
        GROUP BY k.key
    )
    SELECT coalesce(jsonb_object_agg(l.key, greatest(0, least(
               CASE WHEN l.max_running > 0 THEN l.max_running - coalesce(r.n, 0) END,
               CASE WHEN l.rate_per_second > 0
                    THEN floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)) END))),
           '{}')
    INTO rooms
    FROM job_limits AS l
    LEFT JOIN job_key_state AS s ON s.key = l.key
    LEFT JOIN running AS r ON r.key = l.key
    WHERE l.key = ANY (keys) AND (l.max_running > 0 OR l.rate_per_second > 0);
    PERFORM jobs_claim_rooms_remember(rooms, at);
    RETURN rooms;
END
$$;

-- 0029's floor, judging by the last count when it can.
CREATE OR REPLACE FUNCTION jobs_claim_room_floor(keys text[], at timestamptz) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path = public, pg_temp
    AS $$
DECLARE
    rooms jsonb;
    running bigint;
    remembered jsonb := nullif(current_setting('jobs.claim_rooms', true), '')::jsonb;
BEGIN
    -- The rooms this session's last claim counted under its locks, if it was a moment ago and counted
    -- every key asked for.
    IF remembered IS NOT NULL
       AND extract(epoch FROM at) - (remembered ->> 'at')::double precision BETWEEN 0 AND 1
       AND (remembered -> 'rooms') ?& keys THEN
        RETURN remembered -> 'rooms';
    END IF;
    IF EXISTS (SELECT 1 FROM job_limits AS l WHERE l.key = ANY (keys) AND l.max_running > 0) THEN
        -- Every running job, whatever keys it holds: no key has more.
        SELECT count(*) INTO running FROM jobs AS j WHERE j.state = 'running';
    END IF;
    SELECT coalesce(jsonb_object_agg(l.key, greatest(0, least(
               CASE WHEN l.max_running > 0 THEN l.max_running - running END,
               CASE WHEN l.rate_per_second > 0
                    THEN floor(jobs_key_tokens(l.key, l.rate_per_second, l.burst, s.tokens, s.refilled_at, at)) END))),
           '{}')
    INTO rooms
    FROM job_limits AS l
    LEFT JOIN job_key_state AS s ON s.key = l.key
    WHERE l.key = ANY (keys) AND (l.max_running > 0 OR l.rate_per_second > 0);
    RETURN rooms;
END
$$;


DO $$
BEGIN
    IF pg_has_role(current_user, 'jobs_migrator', 'MEMBER') THEN
        ALTER FUNCTION jobs_claim_rooms_remember(jsonb, timestamptz) OWNER TO jobs_migrator;
    END IF;
END $$;
