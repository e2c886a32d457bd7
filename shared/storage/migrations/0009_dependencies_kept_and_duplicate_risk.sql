-- Dependencies outlive their dependents, and a duplicate risk cannot be retried away unseen.

-- Retention keeps a finished job while any job names it in depends_on (sql/retention.sql asks this for
-- every candidate). Jobs without dependencies never enter the index, so they pay nothing for it.
CREATE INDEX jobs_depends_on_idx ON jobs USING gin (depends_on) WHERE depends_on <> '{}';

-- The attempt whose unknown outcome a RetryJob accepted (accept_duplicate_risk). RetryJob asks for that
-- consent whenever the latest attempt's outcome is unknown, whatever state the job is in now (a cancel
-- can end such an attempt CANCELLED), and not again for the same attempt once it was given.
ALTER TABLE jobs ADD COLUMN duplicate_risk_accepted_attempt integer;
