-- Receipts: an attempt's external steps not yet confirmed.
-- after: 0033_claim_statements_merged

-- The lease sweep's question "did this attempt leave an external call unconfirmed?", asked once the
-- sweep holds the job's row lock. VOLATILE on purpose: a volatile function reads with a snapshot of
-- its own, taken when it is called, so it sees an intent committed after the sweep's statement began
-- (the statement's own snapshot does not). receipt_record_intent locks the job row FOR SHARE, so an
-- intent is either committed before the sweep takes the row (and seen here) or refused after.
CREATE OR REPLACE FUNCTION job_unconfirmed_step(p_job_id uuid, p_attempt integer) RETURNS text
    LANGUAGE sql VOLATILE
    AS $$ SELECT step FROM job_receipts
          WHERE job_id = p_job_id AND attempt = p_attempt AND confirmed_at IS NULL
          ORDER BY step
          LIMIT 1 $$;
