-- The W3C trace context a submission arrived with (shared/domain/trace_context.py validates it), so the
-- worker's attempt spans continue the caller's trace. NULL: the caller sent none, or a malformed one.
-- New nullable columns without a default change only the catalog, however many rows the table has.
ALTER TABLE jobs ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- A second guard behind the validation. NOT VALID skips scanning the existing rows (all NULL here)
-- under this migration's exclusive lock; every row written from now on is checked all the same.
ALTER TABLE jobs ADD CONSTRAINT jobs_traceparent_w3c
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_tracestate_bounded
    CHECK (tracestate IS NULL OR (traceparent IS NOT NULL AND length(tracestate) <= 512)) NOT VALID;
