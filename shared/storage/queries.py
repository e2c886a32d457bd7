"""Every runtime SQL statement, loaded once from sql/*.sql as named constants."""

from shared.storage.sql_loader import load_sql_blocks

_jobs = load_sql_blocks("jobs.sql")
_results = load_sql_blocks("results.sql")

JOB_INSERT = _jobs.pop("job_insert")
JOB_GET_BY_IDEMPOTENCY_KEY = _jobs.pop("job_get_by_idempotency_key")
JOB_GET = _jobs.pop("job_get")
JOB_LIST = _jobs.pop("job_list")
JOB_CLAIM_BATCH = _jobs.pop("job_claim_batch")
JOB_RESCUE_EXPIRED = _jobs.pop("job_rescue_expired")
JOB_FAIL_PAST_DEADLINE = _jobs.pop("job_fail_past_deadline")
JOB_HEARTBEAT_BATCH = _jobs.pop("job_heartbeat_batch")
JOB_LEASE_DIAGNOSE = _jobs.pop("job_lease_diagnose")
JOB_COMPLETE_BATCH = _jobs.pop("job_complete_batch")
JOB_FAIL = _jobs.pop("job_fail")
JOB_RELEASE = _jobs.pop("job_release")

RESULT_GET = _results.pop("result_get")

if _jobs or _results:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_jobs) + sorted(_results)}")
