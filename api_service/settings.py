"""The API service's settings, read once from the environment in main() and passed down."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from api_service.console.settings import ConsoleSettings
from api_service.queue_gauges import FAILED_WINDOW_SECONDS_DEFAULT, REFRESH_SECONDS_DEFAULT
from api_service.result_cache import ResultCacheLimits
from api_service.transport_security import ServerTlsFiles
from api_service.usecases.admission import TenantLimits
from api_service.usecases.job_watch import STREAMS_MAX_DEFAULT, STREAMS_PER_TENANT_MAX_DEFAULT
from api_service.usecases.kind_catalog import MAX_STALENESS_SECONDS_DEFAULT as KIND_CACHE_SECONDS_DEFAULT
from api_service.usecases.schedule_runner import FIRES_KEPT_SECONDS_DEFAULT
from api_service.usecases.schedule_runner import POLL_SECONDS_DEFAULT as SCHEDULER_POLL_SECONDS_DEFAULT
from shared.domain.results import RESULT_LIMIT_BYTES_DEFAULT, RESULT_LIMIT_SETTING
from shared.domain.submission_rules import (
    DEDUPE_WINDOW_SECONDS_DEFAULT,
    PAYLOAD_LIMIT_BYTES_DEFAULT,
    SubmissionLimits,
)
from shared.env_settings import SettingsError, env_float, env_int, env_list, env_log_level, env_optional, env_str
from shared.metric_labels import TENANT_LIMIT_DEFAULT
from shared.storage.database_settings import DatabaseSettings

API_LISTEN_DEFAULT = "127.0.0.1:50051"
# gRPC messages carry at most a payload plus envelope; SubmitJobs batches get more room.
GRPC_MESSAGE_BYTES_MIN = 4 * 1024 * 1024
# Calls served at once, Watch streams included; more are refused with RESOURCE_EXHAUSTED.
CONCURRENT_RPCS_MAX_DEFAULT = 1000
DB_POOL_MAX_DEFAULT = 20
DB_ACQUIRE_TIMEOUT_SECONDS_DEFAULT = 5.0
# The longest extension a heartbeat may ask for: a dead worker's job waits at most this for rescue.
LEASE_MAX_SECONDS_DEFAULT = 3600.0
SHUTDOWN_GRACE_SECONDS_DEFAULT = 10.0
HEALTH_INTERVAL_SECONDS_DEFAULT = 1.0
MAX_CONNECTION_AGE_SECONDS_DEFAULT = 300.0


@dataclass(frozen=True)
class ApiSettings:
    database: DatabaseSettings
    listen: str
    metrics_listen: str | None
    # The database gauges: how often they are read, how far back FAILED jobs count, how many tenants
    # keep their names (the rest are "other").
    metrics_refresh_seconds: float
    metrics_failed_window_seconds: float
    metrics_tenant_limit: int
    tokens_file: Path
    # Workers load handler modules; the API never imports user code and only warns when this is set.
    ignored_handler_modules: tuple[str, ...]
    limits: SubmissionLimits
    # The largest result a completion may store (JOBS_MAX_RESULT_BYTES, the workers' too).
    max_result_bytes: int
    db_pool_max: int
    db_acquire_timeout_seconds: float
    lease_max_seconds: float
    shutdown_grace_seconds: float
    health_interval_seconds: float
    log_level: str
    result_cache: ResultCacheLimits
    # How long a SUCCEEDED job still takes in identical submissions that ask for de-duplication.
    dedupe_window_seconds: float
    # How stale the API's copy of the published job kinds may be.
    kind_cache_seconds: float
    # TLS on the gRPC port (None: plaintext), and a plaintext port that serves only grpc.health.v1, for
    # probes that cannot speak TLS.
    tls: ServerTlsFiles | None
    health_listen: str | None
    max_concurrent_rpcs: int
    # Clients reconnect after this long (in-flight calls get the grace), so round-robin clients pick
    # up API pods added by a scale-up; 0 keeps connections for ever.
    max_connection_age_seconds: float
    max_watch_streams: int
    max_watch_streams_per_tenant: int
    tenant_limits: TenantLimits
    # The scheduler loop that fires schedules (every replica runs one unless turned off), and how often
    # it looks for due fires when none were due.
    scheduler_enabled: bool
    scheduler_poll_seconds: float
    # How long a schedule's fire records are kept before the scheduler prunes them.
    schedule_fires_kept_seconds: float
    # The operator console's HTTP listener (JOBS_CONSOLE_LISTEN); None: no console.
    console: ConsoleSettings | None = None

    @property
    def grpc_max_message_bytes(self) -> int:
        largest = max(self.limits.max_payload_bytes, self.max_result_bytes)
        return max(GRPC_MESSAGE_BYTES_MIN, 2 * largest + 64 * 1024)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ApiSettings:
        tokens_file = Path(env_str(env, "JOBS_TOKENS_FILE"))
        if not tokens_file.is_file():
            raise SettingsError(f"JOBS_TOKENS_FILE {str(tokens_file)!r} is not a readable file")
        database = DatabaseSettings.from_env(env)
        metrics_listen = env_optional(env, "JOBS_METRICS_LISTEN")
        if metrics_listen and database.session_url is None:
            # Only one replica may export the queue gauges, and the lock that decides which is a session's.
            raise SettingsError(
                "JOBS_DB_POOLING=transaction with JOBS_METRICS_LISTEN needs DATABASE_DIRECT_URL:"
                " the queue gauges' exporter lock needs a session of its own"
            )
        return cls(
            database=database,
            listen=env_str(env, "JOBS_API_LISTEN", API_LISTEN_DEFAULT),
            metrics_listen=metrics_listen,
            metrics_refresh_seconds=env_float(
                env, "JOBS_METRICS_REFRESH_SECONDS", REFRESH_SECONDS_DEFAULT, minimum=0.1
            ),
            metrics_failed_window_seconds=env_float(
                env, "JOBS_METRICS_FAILED_WINDOW_SECONDS", FAILED_WINDOW_SECONDS_DEFAULT, minimum=1.0
            ),
            metrics_tenant_limit=env_int(env, "JOBS_METRICS_TENANT_LIMIT", TENANT_LIMIT_DEFAULT, minimum=1),
            tokens_file=tokens_file,
            ignored_handler_modules=env_list(env, "JOBS_HANDLER_MODULES"),
            limits=SubmissionLimits(
                max_payload_bytes=env_int(env, "JOBS_MAX_PAYLOAD_BYTES", PAYLOAD_LIMIT_BYTES_DEFAULT, minimum=1),
            ),
            max_result_bytes=env_int(env, RESULT_LIMIT_SETTING, RESULT_LIMIT_BYTES_DEFAULT, minimum=1),
            db_pool_max=env_int(env, "JOBS_DB_POOL_MAX", DB_POOL_MAX_DEFAULT, minimum=2),
            db_acquire_timeout_seconds=env_float(
                env, "JOBS_DB_ACQUIRE_TIMEOUT_SECONDS", DB_ACQUIRE_TIMEOUT_SECONDS_DEFAULT, minimum=0.1
            ),
            lease_max_seconds=env_float(env, "JOBS_LEASE_MAX_SECONDS", LEASE_MAX_SECONDS_DEFAULT, minimum=1.0),
            shutdown_grace_seconds=env_float(env, "JOBS_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS_DEFAULT),
            health_interval_seconds=env_float(
                env, "JOBS_HEALTH_INTERVAL_SECONDS", HEALTH_INTERVAL_SECONDS_DEFAULT, minimum=0.1
            ),
            log_level=env_log_level(env),
            result_cache=_result_cache_limits(env),
            kind_cache_seconds=env_float(env, "JOBS_KIND_CACHE_SECONDS", KIND_CACHE_SECONDS_DEFAULT, minimum=0.0),
            dedupe_window_seconds=env_float(
                env, "JOBS_DEDUPE_WINDOW_SECONDS", DEDUPE_WINDOW_SECONDS_DEFAULT, minimum=0.0
            ),
            tls=ServerTlsFiles.from_env(env),
            health_listen=env_optional(env, "JOBS_HEALTH_LISTEN"),
            max_concurrent_rpcs=env_int(env, "JOBS_MAX_CONCURRENT_RPCS", CONCURRENT_RPCS_MAX_DEFAULT, minimum=1),
            max_connection_age_seconds=env_float(
                env, "JOBS_MAX_CONNECTION_AGE_SECONDS", MAX_CONNECTION_AGE_SECONDS_DEFAULT
            ),
            max_watch_streams=env_int(env, "JOBS_MAX_WATCH_STREAMS", STREAMS_MAX_DEFAULT, minimum=0),
            max_watch_streams_per_tenant=env_int(
                env, "JOBS_MAX_WATCH_STREAMS_PER_TENANT", STREAMS_PER_TENANT_MAX_DEFAULT, minimum=0
            ),
            tenant_limits=_tenant_limits(env),
            scheduler_enabled=env_str(env, "JOBS_SCHEDULER_ENABLED", "true").lower() not in ("0", "false", "no"),
            scheduler_poll_seconds=env_float(
                env, "JOBS_SCHEDULER_POLL_SECONDS", SCHEDULER_POLL_SECONDS_DEFAULT, minimum=0.05
            ),
            schedule_fires_kept_seconds=env_float(
                env, "JOBS_SCHEDULE_FIRES_KEPT_SECONDS", FIRES_KEPT_SECONDS_DEFAULT, minimum=60.0
            ),
            console=ConsoleSettings.from_env(env),
        )


def _result_cache_limits(env: Mapping[str, str]) -> ResultCacheLimits:
    """JOBS_RESULT_CACHE_MAX_ENTRIES=0 keeps nothing (concurrent reads of one key are still shared)."""
    default = ResultCacheLimits()
    return ResultCacheLimits(
        max_entries=env_int(env, "JOBS_RESULT_CACHE_MAX_ENTRIES", default.max_entries),
        max_bytes=env_int(env, "JOBS_RESULT_CACHE_MAX_BYTES", default.max_bytes),
        ttl_seconds=env_float(env, "JOBS_RESULT_CACHE_TTL_SECONDS", default.ttl_seconds, minimum=0.001),
        max_loads_in_flight=env_int(
            env, "JOBS_RESULT_CACHE_MAX_LOADS_IN_FLIGHT", default.max_loads_in_flight, minimum=1
        ),
    )


def _tenant_limits(env: Mapping[str, str]) -> TenantLimits:
    """Each limit is off at 0."""
    default = TenantLimits()
    return TenantLimits(
        submit_rate_per_second=env_float(env, "JOBS_TENANT_SUBMIT_RATE", default.submit_rate_per_second),
        submit_burst=env_int(env, "JOBS_TENANT_SUBMIT_BURST", default.submit_burst, minimum=1),
        max_queued_jobs=env_int(env, "JOBS_TENANT_MAX_QUEUED_JOBS", default.max_queued_jobs),
    )
