-- Job ids: unguessable, and ordered by creation time.
-- after: 0033_claim_statements_merged

-- Job ids the database makes (submissions with a key, a version or dependencies) are time-ordered like
-- those the API makes (shared.domain.ids.new_job_ids): UUIDv7, 48 bits of Unix milliseconds, then
-- random bits, so inserts land on the same few pages of every index keyed by job id.
CREATE OR REPLACE FUNCTION jobs_new_job_id() RETURNS uuid
    LANGUAGE sql VOLATILE
    AS $$
        SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                              PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                                              * 1000)::bigint) FROM 3)
                                              FROM 1 FOR 6),
                                      52, 1),
                              53, 1),
                      'hex')::uuid
    $$;
