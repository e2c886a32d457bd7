-- The claim's stages (routines/claim.sql, applied after 0036) replaced the fair claim and its admission:
-- nothing calls these any more. IF EXISTS: a database made after they left never had them.
DROP FUNCTION IF EXISTS jobs_claim_fair(text, text[], integer, double precision);
DROP FUNCTION IF EXISTS jobs_claim_admit(text, double precision, integer, uuid[]);
DROP FUNCTION IF EXISTS jobs_claim_candidates(uuid[], jsonb);
DROP FUNCTION IF EXISTS jobs_claim_needs_admission(text[], integer[], boolean);
