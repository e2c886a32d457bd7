-- The migrated schema, normalised. Written by tests/test_migrations.py; refresh it with
-- JOBS_UPDATE_SCHEMA_SNAPSHOT=1 .venv/bin/pytest tests/test_migrations.py -k snapshot

CREATE TYPE public.error_category AS ENUM (
    'retryable',
    'permanent',
    'outcome_unknown'
);

CREATE TYPE public.failure_cause AS ENUM (
    'cancel_requested',
    'outcome_unknown',
    'permanent',
    'attempts_exhausted',
    'deadline',
    'retry'
);

CREATE TYPE public.job_executor AS ENUM (
    'async',
    'thread',
    'process'
);

CREATE TYPE public.job_state AS ENUM (
    'pending',
    'blocked',
    'running',
    'retry_wait',
    'succeeded',
    'failed',
    'cancelled',
    'superseded',
    'outcome_unknown'
);

CREATE FUNCTION public.job_unconfirmed_step(p_job_id uuid, p_attempt integer) RETURNS text
    LANGUAGE sql
    AS $$ SELECT step FROM job_receipts
          WHERE job_id = p_job_id AND attempt = p_attempt AND confirmed_at IS NULL
          ORDER BY step
          LIMIT 1 $$;

CREATE FUNCTION public.jobs_bump_sequence() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        NEW.sequence := OLD.sequence + 1;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION public.jobs_changed_batch_size() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 100 $$;

CREATE FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
        WITH doomed AS (
            SELECT j.job_id
            FROM jobs AS j
            WHERE j.job_id = ANY (job_ids)
              AND j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
              AND j.finished_at < clock_timestamp()
                  - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
              AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ), events AS (
            DELETE FROM job_events AS e USING doomed AS d WHERE e.job_id = d.job_id
        ), results AS (
            DELETE FROM job_results AS r USING doomed AS d WHERE r.job_id = d.job_id
        )
        DELETE FROM jobs AS j
        USING doomed AS d
        WHERE j.job_id = d.job_id
        RETURNING j.job_id
    $$;

CREATE FUNCTION public.jobs_next_state_after_failure(category public.error_category, cancel_requested boolean, attempts integer, max_attempts integer, deadline timestamp with time zone, retry_at timestamp with time zone, waiting_state public.job_state) RETURNS TABLE(next_state public.job_state, cause public.failure_cause)
    LANGUAGE sql IMMUTABLE ROWS 1 PARALLEL SAFE
    AS $$
        SELECT CASE decided.cause
                   WHEN 'cancel_requested' THEN 'cancelled'
                   WHEN 'outcome_unknown' THEN 'outcome_unknown'
                   WHEN 'retry' THEN waiting_state
                   ELSE 'failed'
               END::job_state,
               decided.cause
        FROM (SELECT CASE
                  WHEN cancel_requested THEN 'cancel_requested'
                  WHEN category = 'outcome_unknown' THEN 'outcome_unknown'
                  WHEN category = 'permanent' THEN 'permanent'
                  WHEN attempts >= max_attempts THEN 'attempts_exhausted'
                  WHEN deadline IS NOT NULL AND deadline <= retry_at THEN 'deadline'
                  ELSE 'retry'
              END::failure_cause AS cause) AS decided
    $$;

CREATE FUNCTION public.jobs_notify_runnable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Identical notifications in one transaction are folded into one: one wake-up per batch.
    PERFORM pg_notify('jobs_runnable', '');
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_notify_stop() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('jobs_stop', NEW.job_id::text);
    RETURN NULL;
END $$;

CREATE FUNCTION public.jobs_record_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor,
                                reason)
        SELECT n.job_id, n.tenant, n.sequence, NULL, n.state, n.attempts, n.fencing_token, n.transition_actor,
               n.transition_reason
        FROM new_rows AS n;
        PERFORM pg_notify('jobs_changed', string_agg(n.job_id::text || ':' || n.sequence::text, ','))
        FROM (SELECT job_id, sequence, row_number() OVER () AS position FROM new_rows) AS n
        GROUP BY (n.position - 1) / jobs_changed_batch_size();
    ELSE
        -- bump_sequence raised `sequence` exactly for the rows whose state or cancel request changed.
        EXECUTE $sql$
            WITH changed AS MATERIALIZED (
                SELECT n.job_id, n.tenant, n.sequence, o.state AS from_state, n.state AS to_state, n.attempts,
                       n.fencing_token, n.transition_actor, n.transition_reason,
                       row_number() OVER () AS position
                FROM new_rows AS n
                JOIN old_rows AS o ON o.job_id = n.job_id
                WHERE o.sequence IS DISTINCT FROM n.sequence
            ), recorded AS (
                INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token,
                                        actor, reason)
                SELECT job_id, tenant, sequence, from_state, to_state, attempts, fencing_token, transition_actor,
                       transition_reason
                FROM changed
            )
            SELECT pg_notify('jobs_changed', string_agg(c.job_id::text || ':' || c.sequence::text, ','))
            FROM changed AS c
            GROUP BY (c.position - 1) / jobs_changed_batch_size()
        $sql$;
    END IF;
    RETURN NULL;
END $_$;

CREATE FUNCTION public.jobs_retention_floor() RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT interval '1 hour' $$;

CREATE FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
        SELECT j.job_id
        FROM jobs AS j
        WHERE j.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
          AND j.finished_at < clock_timestamp()
              - greatest(make_interval(secs => retention_seconds), jobs_retention_floor())
          AND NOT EXISTS (SELECT 1 FROM jobs AS d WHERE d.depends_on <> '{}' AND d.depends_on @> ARRAY[j.job_id])
        ORDER BY j.finished_at
        LIMIT max_jobs
        FOR UPDATE OF j SKIP LOCKED
    $$;

CREATE FUNCTION public.jobs_retry_backoff(attempt integer, base_seconds double precision, cap_seconds double precision) RETURNS interval
    LANGUAGE sql PARALLEL RESTRICTED
    AS $$ SELECT make_interval(secs => random() * jobs_retry_backoff_ceiling(attempt, base_seconds, cap_seconds)) $$;

CREATE FUNCTION public.jobs_retry_backoff_ceiling(attempt integer, base_seconds double precision, cap_seconds double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE
            WHEN base_seconds <= 0 OR cap_seconds <= 0 THEN 0
            WHEN greatest(attempt - 1, 0) >= least(1023, (ln(cap_seconds) - ln(base_seconds)) / ln(2))
                THEN cap_seconds
            ELSE base_seconds * power(2::double precision, greatest(attempt - 1, 0))
        END
    $$;

CREATE FUNCTION public.jobs_settle_dependents() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    ended record;
BEGIN
    FOR ended IN EXECUTE $sql$
        SELECT n.job_id, n.state
        FROM new_rows AS n
        JOIN old_rows AS o ON o.job_id = n.job_id
        WHERE o.state IS DISTINCT FROM n.state
          AND n.state IN ('succeeded', 'failed', 'cancelled', 'superseded')
          AND EXISTS (SELECT 1 FROM jobs AS d WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[n.job_id])
        ORDER BY n.job_id
    $sql$
    LOOP
        IF ended.state = 'succeeded' THEN
            PERFORM 1 FROM jobs AS d
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id]
            ORDER BY d.job_id
            FOR UPDATE;
            UPDATE jobs AS d
            SET state = 'pending', run_after = greatest(d.run_after, clock_timestamp()),
                transition_actor = 'system', transition_reason = 'dependencies succeeded'
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id]
              AND NOT EXISTS (
                  SELECT 1 FROM jobs AS p
                  WHERE p.job_id = ANY (d.depends_on) AND p.state <> 'succeeded');
        ELSE
            UPDATE jobs AS d
            SET state = 'failed', finished_at = clock_timestamp(),
                last_error_category = 'permanent',
                last_error_message = 'dependency ' || ended.job_id || ' ended ' || ended.state,
                transition_actor = 'system',
                transition_reason = 'dependency ' || ended.job_id || ' ended ' || ended.state
            WHERE d.state = 'blocked' AND d.depends_on @> ARRAY[ended.job_id];
        END IF;
    END LOOP;
    RETURN NULL;
END $_$;

CREATE FUNCTION public.jobs_tenant_visible(row_tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT row_tenant = coalesce(nullif(current_setting('jobs.tenant', true), ''), row_tenant) $$;

CREATE TABLE public.admin_actions (
    action_id bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text DEFAULT ''::text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL
);

ALTER TABLE public.admin_actions ALTER COLUMN action_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.admin_actions_action_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.job_attempt_errors (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    category public.error_category NOT NULL,
    message text NOT NULL,
    traceback text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_events (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    sequence bigint NOT NULL,
    from_state public.job_state,
    to_state public.job_state NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_kind_publishers (
    kind text NOT NULL,
    publisher text NOT NULL,
    policy_digest bytea NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.job_kinds (
    kind text NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base_seconds double precision NOT NULL,
    backoff_cap_seconds double precision NOT NULL,
    timeout_seconds double precision,
    external_side_effects boolean NOT NULL,
    limit_keys text[] DEFAULT '{}'::text[] NOT NULL,
    executor public.job_executor NOT NULL,
    policy_digest bytea NOT NULL,
    published_by text NOT NULL,
    publisher_started_at timestamp with time zone NOT NULL,
    first_published_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    last_published_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    retired_at timestamp with time zone,
    retired_by text,
    CONSTRAINT job_kinds_backoff_base_seconds_check CHECK ((backoff_base_seconds >= (0)::double precision)),
    CONSTRAINT job_kinds_backoff_cap_seconds_check CHECK ((backoff_cap_seconds >= (0)::double precision)),
    CONSTRAINT job_kinds_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_kinds_timeout_seconds_check CHECK ((timeout_seconds > (0)::double precision))
);

CREATE TABLE public.job_limits (
    key text NOT NULL,
    max_running integer DEFAULT 0 NOT NULL,
    rate_per_second double precision DEFAULT 0 NOT NULL,
    burst integer DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_by text NOT NULL,
    CONSTRAINT job_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT job_limits_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT job_limits_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT job_limits_rate_per_second_check CHECK (((rate_per_second >= (0)::double precision) AND (rate_per_second < 'Infinity'::double precision)))
);

CREATE TABLE public.job_receipts (
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    step text NOT NULL,
    fencing_token bigint NOT NULL,
    intent bytea NOT NULL,
    receipt bytea,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    confirmed_at timestamp with time zone
);

CREATE TABLE public.job_results (
    job_id uuid NOT NULL,
    tenant text NOT NULL,
    payload bytea NOT NULL,
    attempt integer NOT NULL,
    fencing_token bigint NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.jobs (
    job_id uuid DEFAULT gen_random_uuid() NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    state public.job_state NOT NULL,
    payload bytea NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    deadline timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base_seconds double precision DEFAULT 1 NOT NULL,
    backoff_cap_seconds double precision DEFAULT 300 NOT NULL,
    idempotency_key text,
    request_digest bytea,
    resource_key text,
    resource_version bigint,
    depends_on uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    labels jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    fencing_token bigint DEFAULT 0 NOT NULL,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    last_error_category public.error_category,
    last_error_message text,
    sequence bigint DEFAULT 1 NOT NULL,
    transition_actor text DEFAULT 'system'::text NOT NULL,
    transition_reason text DEFAULT ''::text NOT NULL,
    retry_budget integer NOT NULL,
    input_digest bytea,
    traceparent text,
    tracestate text,
    duplicate_risk_accepted_attempt integer,
    CONSTRAINT jobs_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT jobs_backoff_base_seconds_check CHECK ((backoff_base_seconds >= (0)::double precision)),
    CONSTRAINT jobs_backoff_cap_seconds_check CHECK ((backoff_cap_seconds >= (0)::double precision)),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_resource_version_with_key CHECK (((resource_key IS NULL) = (resource_version IS NULL))),
    CONSTRAINT jobs_retry_budget_positive CHECK ((retry_budget >= 1)),
    CONSTRAINT jobs_running_has_lease CHECK (((state <> 'running'::public.job_state) OR (lease_expires_at IS NOT NULL)))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.02');

CREATE TABLE public.kind_pauses (
    kind text NOT NULL,
    paused_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    paused_by text NOT NULL,
    reason text DEFAULT ''::text NOT NULL
);

CREATE TABLE public.resource_heads (
    tenant text NOT NULL,
    resource_key text NOT NULL,
    latest_version bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.tenant_weights (
    tenant text NOT NULL,
    weight integer NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_by text NOT NULL,
    CONSTRAINT tenant_weights_weight_check CHECK (((weight >= 1) AND (weight <= 10000)))
);

ALTER TABLE ONLY public.admin_actions
    ADD CONSTRAINT admin_actions_pkey PRIMARY KEY (action_id);

ALTER TABLE ONLY public.job_attempt_errors
    ADD CONSTRAINT job_attempt_errors_pkey PRIMARY KEY (job_id, fencing_token);

ALTER TABLE ONLY public.job_events
    ADD CONSTRAINT job_events_pkey PRIMARY KEY (job_id, sequence);

ALTER TABLE ONLY public.job_kind_publishers
    ADD CONSTRAINT job_kind_publishers_pkey PRIMARY KEY (kind, publisher);

ALTER TABLE ONLY public.job_kinds
    ADD CONSTRAINT job_kinds_pkey PRIMARY KEY (kind);

ALTER TABLE ONLY public.job_limits
    ADD CONSTRAINT job_limits_pkey PRIMARY KEY (key);

ALTER TABLE ONLY public.job_receipts
    ADD CONSTRAINT job_receipts_pkey PRIMARY KEY (job_id, attempt, step);

ALTER TABLE ONLY public.job_results
    ADD CONSTRAINT job_results_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_id);

ALTER TABLE public.jobs
    ADD CONSTRAINT jobs_traceparent_w3c CHECK ((traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)) NOT VALID;

ALTER TABLE public.jobs
    ADD CONSTRAINT jobs_tracestate_bounded CHECK (((tracestate IS NULL) OR ((traceparent IS NOT NULL) AND (length(tracestate) <= 512)))) NOT VALID;

ALTER TABLE ONLY public.kind_pauses
    ADD CONSTRAINT kind_pauses_pkey PRIMARY KEY (kind);

ALTER TABLE ONLY public.resource_heads
    ADD CONSTRAINT resource_heads_pkey PRIMARY KEY (tenant, resource_key);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.tenant_weights
    ADD CONSTRAINT tenant_weights_pkey PRIMARY KEY (tenant);

CREATE INDEX admin_actions_at_idx ON public.admin_actions USING btree (at);

CREATE INDEX job_kind_publishers_seen_idx ON public.job_kind_publishers USING btree (last_seen_at);

CREATE INDEX jobs_blocked_depends_on_idx ON public.jobs USING gin (depends_on) WHERE (state = 'blocked'::public.job_state);

CREATE INDEX jobs_dedupe_input_idx ON public.jobs USING btree (tenant, kind, input_digest, COALESCE(finished_at, 'infinity'::timestamp with time zone)) WHERE ((input_digest IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'retry_wait'::public.job_state, 'running'::public.job_state, 'succeeded'::public.job_state])));

CREATE INDEX jobs_depends_on_idx ON public.jobs USING gin (depends_on) WHERE (depends_on <> '{}'::uuid[]);

CREATE INDEX jobs_finished_idx ON public.jobs USING btree (finished_at) WHERE (state = ANY (ARRAY['succeeded'::public.job_state, 'failed'::public.job_state, 'cancelled'::public.job_state, 'superseded'::public.job_state]));

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON public.jobs USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX jobs_queue_gauge_idx ON public.jobs USING btree (state, finished_at) WHERE (state = ANY (ARRAY['blocked'::public.job_state, 'failed'::public.job_state, 'outcome_unknown'::public.job_state]));

CREATE INDEX jobs_runnable_idx ON public.jobs USING btree (priority DESC, run_after, job_id) WHERE (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state]));

CREATE INDEX jobs_running_lease_idx ON public.jobs USING btree (lease_expires_at) WHERE (state = 'running'::public.job_state);

CREATE INDEX jobs_tenant_created_idx ON public.jobs USING btree (tenant, created_at DESC, job_id DESC);

CREATE INDEX jobs_tenant_queued_idx ON public.jobs USING hash (tenant) WHERE (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state]));

CREATE INDEX jobs_tenant_resource_idx ON public.jobs USING btree (tenant, resource_key, resource_version DESC) WHERE (resource_key IS NOT NULL);

CREATE INDEX jobs_waiting_deadline_idx ON public.jobs USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.job_state, 'retry_wait'::public.job_state, 'blocked'::public.job_state])));

CREATE TRIGGER jobs_bump_sequence BEFORE UPDATE ON public.jobs FOR EACH ROW EXECUTE FUNCTION public.jobs_bump_sequence();

CREATE TRIGGER jobs_notify_runnable_insert AFTER INSERT ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_notify_runnable();

CREATE TRIGGER jobs_notify_stop AFTER UPDATE ON public.jobs FOR EACH ROW WHEN (((old.state = 'running'::public.job_state) AND ((new.cancel_requested AND (NOT old.cancel_requested)) OR (new.state = 'superseded'::public.job_state)))) EXECUTE FUNCTION public.jobs_notify_stop();

CREATE TRIGGER jobs_record_insert AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_record_event();

CREATE TRIGGER jobs_record_update AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_record_event();

CREATE TRIGGER jobs_settle_dependents AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.jobs_settle_dependents();

ALTER TABLE ONLY public.job_attempt_errors
    ADD CONSTRAINT job_attempt_errors_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE ONLY public.job_receipts
    ADD CONSTRAINT job_receipts_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id) ON DELETE CASCADE;

ALTER TABLE public.job_attempt_errors ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_attempt_errors_api_tenant ON public.job_attempt_errors TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.job_events ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_events_api_tenant ON public.job_events TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

CREATE POLICY job_events_worker_insert ON public.job_events FOR INSERT TO jobs_worker WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_events.job_id) AND (j.tenant = job_events.tenant) AND (j.sequence = job_events.sequence) AND (j.state = job_events.to_state)))));

ALTER TABLE public.job_receipts ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_receipts_api_tenant ON public.job_receipts FOR SELECT TO jobs_api USING ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE (j.job_id = job_receipts.job_id))));

CREATE POLICY job_receipts_worker_insert ON public.job_receipts FOR INSERT TO jobs_worker WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token)))));

CREATE POLICY job_receipts_worker_read ON public.job_receipts FOR SELECT TO jobs_worker USING (true);

CREATE POLICY job_receipts_worker_update ON public.job_receipts FOR UPDATE TO jobs_worker USING ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token))))) WITH CHECK ((EXISTS ( SELECT 1
   FROM public.jobs j
  WHERE ((j.job_id = job_receipts.job_id) AND (j.state = 'running'::public.job_state) AND (j.attempts = job_receipts.attempt) AND (j.fencing_token = job_receipts.fencing_token)))));

ALTER TABLE public.job_results ENABLE ROW LEVEL SECURITY;

CREATE POLICY job_results_api_tenant ON public.job_results TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

ALTER TABLE public.jobs ENABLE ROW LEVEL SECURITY;

CREATE POLICY jobs_api_tenant ON public.jobs TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

CREATE POLICY jobs_worker_read ON public.jobs FOR SELECT TO jobs_worker USING (true);

CREATE POLICY jobs_worker_update ON public.jobs FOR UPDATE TO jobs_worker USING ((state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'running'::public.job_state, 'retry_wait'::public.job_state]))) WITH CHECK (
CASE
    WHEN (state = ANY (ARRAY['pending'::public.job_state, 'blocked'::public.job_state, 'running'::public.job_state, 'retry_wait'::public.job_state, 'outcome_unknown'::public.job_state])) THEN (finished_at IS NULL)
    WHEN (state = 'failed'::public.job_state) THEN ((finished_at >= now()) AND (finished_at <= clock_timestamp()))
    WHEN (state = 'cancelled'::public.job_state) THEN (cancel_requested AND ((finished_at >= now()) AND (finished_at <= clock_timestamp())))
    ELSE false
END);

ALTER TABLE public.resource_heads ENABLE ROW LEVEL SECURITY;

CREATE POLICY resource_heads_api_tenant ON public.resource_heads TO jobs_api USING (public.jobs_tenant_visible(tenant)) WITH CHECK (public.jobs_tenant_visible(tenant));

GRANT USAGE ON SCHEMA public TO jobs_api;
GRANT USAGE ON SCHEMA public TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_delete_finished(job_ids uuid[], retention_seconds double precision) TO jobs_worker;

REVOKE ALL ON FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.jobs_retention_lock(retention_seconds double precision, max_jobs integer) TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.admin_actions TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.job_attempt_errors TO jobs_api;

GRANT SELECT,INSERT ON TABLE public.job_events TO jobs_api;
GRANT INSERT ON TABLE public.job_events TO jobs_worker;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_kind_publishers TO jobs_worker;
GRANT SELECT ON TABLE public.job_kind_publishers TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.job_kinds TO jobs_worker;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_kinds TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.job_limits TO jobs_api;
GRANT SELECT ON TABLE public.job_limits TO jobs_worker;

GRANT SELECT ON TABLE public.job_receipts TO jobs_api;
GRANT SELECT,INSERT,UPDATE ON TABLE public.job_receipts TO jobs_worker;

GRANT SELECT,INSERT ON TABLE public.job_results TO jobs_api;

GRANT SELECT,INSERT,UPDATE ON TABLE public.jobs TO jobs_api;
GRANT SELECT ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(state) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(run_after) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(attempts) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(started_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(finished_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(fencing_token) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(lease_owner) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(lease_expires_at) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(last_error_category) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(last_error_message) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(transition_actor) ON TABLE public.jobs TO jobs_worker;

GRANT UPDATE(transition_reason) ON TABLE public.jobs TO jobs_worker;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.kind_pauses TO jobs_api;
GRANT SELECT ON TABLE public.kind_pauses TO jobs_worker;

GRANT SELECT,INSERT,UPDATE ON TABLE public.resource_heads TO jobs_api;

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tenant_weights TO jobs_api;
GRANT SELECT ON TABLE public.tenant_weights TO jobs_worker;
