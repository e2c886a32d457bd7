-- A job's `sequence` rises by one with every change of its state or cancel request (0001's row trigger),
-- and the history records exactly the rows where it rose (0020). The statements that make most
-- transitions, the claim in one pass (0022) and the completion batch, now raise it themselves in the row
-- they write, and the trigger is called only for a row whose statement did not write what the rule says.
-- It then writes it, whatever the statement wrote: so the rule holds for every statement and every role,
-- and a worker may write the column (its claim does) without being able to set it to anything else.
-- A PL/pgSQL call per updated row was about 1.5 us of each claimed and each completed job (batches of
-- 500 on one connection: claim 20.6 -> 19.1 us a job, completion 21.5 -> 19.9).
CREATE OR REPLACE FUNCTION jobs_bump_sequence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        NEW.sequence := OLD.sequence + 1;
    ELSE
        NEW.sequence := OLD.sequence;
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER jobs_bump_sequence ON jobs;
CREATE TRIGGER jobs_bump_sequence BEFORE UPDATE ON jobs
    FOR EACH ROW
    WHEN (NEW.sequence IS DISTINCT FROM
          CASE WHEN OLD.state IS DISTINCT FROM NEW.state OR OLD.cancel_requested IS DISTINCT FROM NEW.cancel_requested
               THEN OLD.sequence + 1 ELSE OLD.sequence END)
    EXECUTE FUNCTION jobs_bump_sequence();

GRANT UPDATE (sequence) ON jobs TO jobs_worker;
