"""Every runtime SQL statement, loaded once from sql/*.sql as named constants."""

from shared.storage.sql_loader import load_sql_blocks

_jobs = load_sql_blocks("jobs.sql")
_results = load_sql_blocks("results.sql")
_events = load_sql_blocks("events.sql")
_receipts = load_sql_blocks("receipts.sql")
_metrics = load_sql_blocks("metrics.sql")
_session = load_sql_blocks("session.sql")
_migrations = load_sql_blocks("migrations.sql")
_kinds = load_sql_blocks("kinds.sql")
_admin = load_sql_blocks("admin.sql")
_scheduling = load_sql_blocks("scheduling.sql")
_schedules = load_sql_blocks("schedules.sql")
_operator = load_sql_blocks("operator.sql")

JOB_INSERT = _jobs.pop("job_insert")
JOB_INSERT_MANY = _jobs.pop("job_insert_many")
JOB_INSERT_MANY_IDS = _jobs.pop("job_insert_many_ids")
JOB_DEPENDENCY_STATES = _jobs.pop("job_dependency_states")
RESOURCE_HEAD_LOCK = _jobs.pop("resource_head_lock")
RESOURCE_HEAD_ADVANCE = _jobs.pop("resource_head_advance")
JOB_SUPERSEDE_OLDER = _jobs.pop("job_supersede_older")
JOB_CANCEL = _jobs.pop("job_cancel")
RESOURCE_HEAD_LOCK_FOR_RETRY = _jobs.pop("resource_head_lock_for_retry")
JOB_LOCK_FOR_RETRY = _jobs.pop("job_lock_for_retry")
JOB_RETRY = _jobs.pop("job_retry")
JOB_GET_BY_IDEMPOTENCY_KEY = _jobs.pop("job_get_by_idempotency_key")
JOB_INPUT_LOCK = _jobs.pop("job_input_lock")
JOB_KEY_LOCK = _jobs.pop("job_key_lock")
JOB_SEQUENCE_HOLD = _jobs.pop("job_sequence_hold")
JOB_SEQUENCE_JOIN = _jobs.pop("job_sequence_join")
JOB_SINGLETON_ACTIVE = _jobs.pop("job_singleton_active")
JOB_DEBOUNCE_COLLAPSE = _jobs.pop("job_debounce_collapse")
JOB_FIND_ATTACHABLE = _jobs.pop("job_find_attachable")
JOB_GET = _jobs.pop("job_get")
JOB_LIST = _jobs.pop("job_list")
JOB_LIST_CHILDREN = _jobs.pop("job_list_children")
JOB_LIST_SEQUENCE = _jobs.pop("job_list_sequence")
JOB_CLAIM_BATCH = _jobs.pop("job_claim_batch")
JOB_LOCK_EXPIRED_LEASES = _jobs.pop("job_lock_expired_leases")
JOB_RESCUE_EXPIRED = _jobs.pop("job_rescue_expired")
JOB_LOCK_PAST_DEADLINE = _jobs.pop("job_lock_past_deadline")
JOB_FAIL_PAST_DEADLINE = _jobs.pop("job_fail_past_deadline")
JOB_HEARTBEAT_BATCH = _jobs.pop("job_heartbeat_batch")
JOB_LEASE_DIAGNOSE = _jobs.pop("job_lease_diagnose")
JOB_COMPLETE_BATCH = _jobs.pop("job_complete_batch")
JOB_FAIL = _jobs.pop("job_fail")
JOB_RELEASE = _jobs.pop("job_release")
JOB_PUSH_BACK = _jobs.pop("job_push_back")
JOB_COUNT_QUEUED = _jobs.pop("job_count_queued")

RESULT_GET = _results.pop("result_get")
RESOURCE_HEAD_GET = _results.pop("resource_head_get")
RESULT_FOR_RESOURCE_VERSION = _results.pop("result_for_resource_version")

EVENT_LIST = _events.pop("event_list")
ATTEMPT_ERROR_RECORD = _events.pop("attempt_error_record")
CHANGE_WATCHER_REGISTER = _events.pop("change_watcher_register")

RECEIPT_RECORD_INTENT = _receipts.pop("receipt_record_intent")
RECEIPT_CONFIRM = _receipts.pop("receipt_confirm")
RECEIPT_LIST = _receipts.pop("receipt_list")

METRICS_EXPORTER_LOCK_TRY = _metrics.pop("metrics_exporter_lock_try")
METRICS_QUEUE_SNAPSHOT = _metrics.pop("metrics_queue_snapshot")
METRICS_LIMIT_SNAPSHOT = _metrics.pop("metrics_limit_snapshot")
METRICS_KIND_PAUSES = _metrics.pop("metrics_kind_pauses")
METRICS_SEQUENCES_HALTED = _metrics.pop("metrics_sequences_halted")

SESSION_BEGIN = _session.pop("session_begin")
SESSION_TIME_ZONE_UTC = _session.pop("session_time_zone_utc")
SESSION_SCOPE_TENANT = _session.pop("session_scope_tenant")
SESSION_SCOPE_TIMEOUT = _session.pop("session_scope_timeout")
SESSION_SCOPE_TENANT_AND_TIMEOUT = _session.pop("session_scope_tenant_and_timeout")
SESSION_PING = _session.pop("session_ping")
SESSION_ALIVE = _session.pop("session_alive")

KIND_PUBLISH = _kinds.pop("kind_publish")
KIND_PUBLISH_BUILTIN = _kinds.pop("kind_publish_builtin")
KIND_LIST_KNOWN = _kinds.pop("kind_list_known")
KIND_POLICY_CONFLICTS = _kinds.pop("kind_policy_conflicts")
KIND_PUBLISHERS_FORGET = _kinds.pop("kind_publishers_forget")
KIND_RETIRE = _kinds.pop("kind_retire")

LIMIT_SET = _admin.pop("limit_set")
LIMIT_DELETE = _admin.pop("limit_delete")
LIMIT_LIST = _admin.pop("limit_list")
TENANT_WEIGHT_SET = _admin.pop("tenant_weight_set")
TENANT_WEIGHT_LIST = _admin.pop("tenant_weight_list")
KIND_PAUSE = _admin.pop("kind_pause")
KIND_RESUME = _admin.pop("kind_resume")
KIND_STATUS_LIST = _admin.pop("kind_status_list")
ADMIN_ACTION_RECORD = _admin.pop("admin_action_record")
ADMIN_JOB_SEARCH = _admin.pop("admin_job_search")
ADMIN_JOB_MATCH = _admin.pop("admin_job_match")
ADMIN_JOB_TENANT = _admin.pop("admin_job_tenant")
JOB_SET_LIMIT_KEYS = _scheduling.pop("job_set_limit_keys")
KEY_HOLD = _scheduling.pop("key_hold")
JOB_HOLD_PUSHED_KEY = _scheduling.pop("job_hold_pushed_key")
JOB_WAITING_REASON = _scheduling.pop("job_waiting_reason")
KEY_CHARGES_KEYS = _scheduling.pop("key_charges_keys")
KEY_CHARGES_FOLD = _scheduling.pop("key_charges_fold")
RUNNING_TALLIES_TEND = _scheduling.pop("running_tallies_tend")
SCHEDULE_INSERT = _schedules.pop("schedule_insert")
SCHEDULE_GET = _schedules.pop("schedule_get")
SCHEDULE_LOCK = _schedules.pop("schedule_lock")
SCHEDULE_LIST = _schedules.pop("schedule_list")
SCHEDULE_SET_PAUSED = _schedules.pop("schedule_set_paused")
SCHEDULE_DELETE = _schedules.pop("schedule_delete")
SCHEDULE_CLAIM_DUE = _schedules.pop("schedule_claim_due")
SCHEDULE_CLOCK = _schedules.pop("schedule_clock")
SCHEDULE_RECORD_STEP = _schedules.pop("schedule_record_step")
SCHEDULE_FIRE_RECORD = _schedules.pop("schedule_fire_record")
SCHEDULE_FIRES_PRUNE = _schedules.pop("schedule_fires_prune")

OPERATOR_QUEUE_OVERVIEW = _operator.pop("operator_queue_overview")
OPERATOR_JOB_GET = _operator.pop("operator_job_get")
OPERATOR_JOB_DEPENDENCIES = _operator.pop("operator_job_dependencies")
OPERATOR_JOB_DEPENDENTS_PAGE = _operator.pop("operator_job_dependents_page")
OPERATOR_JOB_CHILDREN_PAGE = _operator.pop("operator_job_children_page")

MIGRATION_LOCK = _migrations.pop("migration_lock")
MIGRATION_UNLOCK = _migrations.pop("migration_unlock")
MIGRATION_TABLE_CREATE = _migrations.pop("migration_table_create")
MIGRATION_APPLIED_VERSIONS = _migrations.pop("migration_applied_versions")
MIGRATION_RECORD = _migrations.pop("migration_record")
ROUTINE_TABLE_CREATE = _migrations.pop("routine_table_create")
ROUTINE_APPLIED_CHECKSUMS = _migrations.pop("routine_applied_checksums")
ROUTINE_BODY_CHECKS_OFF = _migrations.pop("routine_body_checks_off")
ROUTINE_BODY_CHECKS_ON = _migrations.pop("routine_body_checks_on")
ROUTINE_APPLIED_NAMES = _migrations.pop("routine_applied_names")
ROUTINE_OWNER_HANDOVER = _migrations.pop("routine_owner_handover")
ROUTINE_RECORD = _migrations.pop("routine_record")

_resources = load_sql_blocks("resources.sql")
RESOURCE_HEAD_LOCK_EXISTING = _resources.pop("resource_head_lock_existing")
RESOURCE_TOMBSTONE_WRITE = _resources.pop("resource_tombstone_write")
JOB_CANCEL_DELETED_RESOURCE = _resources.pop("job_cancel_deleted_resource")
RESULT_DELETE_DELETED_RESOURCE = _resources.pop("result_delete_deleted_resource")
RESOURCE_DELETION_RECORD = _resources.pop("resource_deletion_record")

DEPENDENCY_RESULTS_PAGE = _results.pop("dependency_results_page")

_delivery_sets = load_sql_blocks("delivery_sets.sql")
DELIVERY_SET_GET_BY_VERSION = _delivery_sets.pop("delivery_set_get_by_version")
DELIVERY_SET_GET_HIGHEST = _delivery_sets.pop("delivery_set_get_highest")
DELIVERY_SET_INSERT = _delivery_sets.pop("delivery_set_insert")
DELIVERY_SET_MEMBERS_INSERT = _delivery_sets.pop("delivery_set_members_insert")
DELIVERY_SET_MEMBERS_READ = _delivery_sets.pop("delivery_set_members_read")
DELIVERY_SET_GET_BY_ID = _delivery_sets.pop("delivery_set_get_by_id")
DELIVERY_SET_RESULTS_READ = _delivery_sets.pop("delivery_set_results_read")

_unused = sorted(
    name
    for blocks in (
        _jobs,
        _results,
        _events,
        _receipts,
        _metrics,
        _session,
        _migrations,
        _kinds,
        _admin,
        _scheduling,
        _resources,
        _delivery_sets,
        _schedules,
        _operator,
    )
    for name in blocks
)
if _unused:
    raise RuntimeError(f"SQL blocks without a constant: {_unused}")
