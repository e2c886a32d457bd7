"""A worker replica's settings, read once from the environment in main() and passed down."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from shared.domain.results import RESULT_LIMIT_BYTES_DEFAULT, RESULT_LIMIT_SETTING
from shared.env_settings import env_float, env_int, env_list, env_log_level, env_optional, env_str
from shared.metric_labels import TENANT_LIMIT_DEFAULT
from shared.storage.database_settings import DatabaseSettings
from worker_service.completion_batcher import CALLS_MAX_DEFAULT as COMPLETION_CALLS_MAX_DEFAULT
from worker_service.health_server import LIVENESS_STALL_SECONDS_DEFAULT
from worker_service.kind_publisher import PUBLISH_INTERVAL_SECONDS_DEFAULT
from worker_service.progress_reporter import PROGRESS_INTERVAL_SECONDS_DEFAULT
from worker_service.transport_security import ClientTlsFiles

API_TARGET_DEFAULT = "127.0.0.1:50051"
LEASE_SECONDS_DEFAULT = 30.0
CONCURRENCY_DEFAULT = 10
RETENTION_SECONDS_DEFAULT = 7 * 24 * 3600.0
POLL_INTERVAL_SECONDS_DEFAULT = 1.0
# Sweeps at least four times per lease, so an expired lease waits at most a quarter lease for rescue.
RESCUE_INTERVAL_SECONDS_MAX = 5.0
SHUTDOWN_GRACE_SECONDS_DEFAULT = 20.0
# How long a completion waits for others to share its CompleteJobs call.
COMPLETION_FLUSH_SECONDS_DEFAULT = 0.002
# A claim takes every free slot and a report every finished job, up to these: the fixed part of a claim's
# and a completion's statement (about half a millisecond of the server's CPU each, and as much of the
# callers') is spread over as many jobs as are ready. At 1,000 slots a replica, caps of 200 cost 11% more
# CPU a job than caps of 1,000 (docs/PERFORMANCE.md); reports still overlap claims, since a slot is free
# once its handler returns and several completion calls travel at once. A completion call also stops at
# BATCH_BYTES_MAX, under the API's message limit.
COMPLETION_BATCH_MAX_DEFAULT = 1000
CLAIM_BATCH_MAX_DEFAULT = 1000
RETENTION_INTERVAL_SECONDS_DEFAULT = 60.0


@dataclass(frozen=True)
class WorkerSettings:
    database: DatabaseSettings
    api_target: str
    worker_token: str
    worker_id: str
    lease_seconds: float
    concurrency: int
    metrics_listen: str | None
    handler_modules: tuple[str, ...]
    # Fallback when no wake-up notification arrives; jittered so replicas do not poll in step.
    poll_interval_seconds: float
    rescue_interval_seconds: float
    shutdown_grace_seconds: float
    completion_flush_seconds: float
    completion_batch_max: int
    # Finished jobs are deleted this long after they ended; 0 keeps them forever.
    retention_seconds: float
    retention_interval_seconds: float
    # Largest claim (the statement's rows): past it, a replica with more free slots claims again.
    claim_batch_max: int
    metrics_tenant_limit: int
    log_level: str
    # /livez fails once the event loop has not run for this long.
    liveness_stall_seconds: float
    # How often this replica republishes its kinds (the API and the conflict check count it as live).
    kind_publish_interval_seconds: float
    # None: plaintext to the API.
    tls: ClientTlsFiles | None
    # At most one progress write per job per interval; the latest value wins.
    progress_interval_seconds: float = PROGRESS_INTERVAL_SECONDS_DEFAULT
    # A larger result fails its attempt PERMANENT here, never sent (JOBS_MAX_RESULT_BYTES, as the API's).
    max_result_bytes: int = RESULT_LIMIT_BYTES_DEFAULT
    # CompleteJobs calls one replica keeps in flight at once.
    completion_calls_max: int = COMPLETION_CALLS_MAX_DEFAULT

    @property
    def heartbeat_interval_seconds(self) -> float:
        # Three chances to extend before the lease runs out.
        return self.lease_seconds / 3

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerSettings:
        lease_seconds = env_float(env, "JOBS_LEASE_SECONDS", LEASE_SECONDS_DEFAULT, minimum=1.0)
        return cls(
            database=DatabaseSettings.from_env(env),
            api_target=env_str(env, "JOBS_API_TARGET", API_TARGET_DEFAULT),
            worker_token=env_str(env, "JOBS_WORKER_TOKEN"),
            worker_id=env_str(env, "JOBS_WORKER_ID", f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"),
            lease_seconds=lease_seconds,
            concurrency=env_int(env, "JOBS_WORKER_CONCURRENCY", CONCURRENCY_DEFAULT, minimum=1),
            metrics_listen=env_optional(env, "JOBS_METRICS_LISTEN"),
            handler_modules=env_list(env, "JOBS_HANDLER_MODULES"),
            poll_interval_seconds=env_float(
                env, "JOBS_POLL_INTERVAL_SECONDS", POLL_INTERVAL_SECONDS_DEFAULT, minimum=0.05
            ),
            rescue_interval_seconds=env_float(
                env, "JOBS_RESCUE_INTERVAL_SECONDS", min(RESCUE_INTERVAL_SECONDS_MAX, lease_seconds / 4), minimum=0.1
            ),
            shutdown_grace_seconds=env_float(env, "JOBS_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE_SECONDS_DEFAULT),
            completion_flush_seconds=env_float(env, "JOBS_COMPLETION_FLUSH_SECONDS", COMPLETION_FLUSH_SECONDS_DEFAULT),
            completion_batch_max=env_int(env, "JOBS_COMPLETION_BATCH_MAX", COMPLETION_BATCH_MAX_DEFAULT, minimum=1),
            claim_batch_max=env_int(env, "JOBS_CLAIM_BATCH_MAX", CLAIM_BATCH_MAX_DEFAULT, minimum=1),
            retention_seconds=env_float(env, "JOBS_RETENTION_SECONDS", RETENTION_SECONDS_DEFAULT),
            retention_interval_seconds=env_float(
                env, "JOBS_RETENTION_INTERVAL_SECONDS", RETENTION_INTERVAL_SECONDS_DEFAULT, minimum=1.0
            ),
            metrics_tenant_limit=env_int(env, "JOBS_METRICS_TENANT_LIMIT", TENANT_LIMIT_DEFAULT, minimum=1),
            log_level=env_log_level(env),
            liveness_stall_seconds=env_float(
                env, "JOBS_LIVENESS_STALL_SECONDS", LIVENESS_STALL_SECONDS_DEFAULT, minimum=1.0
            ),
            kind_publish_interval_seconds=env_float(
                env, "JOBS_KIND_PUBLISH_INTERVAL_SECONDS", PUBLISH_INTERVAL_SECONDS_DEFAULT, minimum=0.1
            ),
            tls=ClientTlsFiles.from_env(env),
            progress_interval_seconds=env_float(
                env, "JOBS_PROGRESS_INTERVAL_SECONDS", PROGRESS_INTERVAL_SECONDS_DEFAULT, minimum=0.05
            ),
            max_result_bytes=env_int(env, RESULT_LIMIT_SETTING, RESULT_LIMIT_BYTES_DEFAULT, minimum=1),
            completion_calls_max=env_int(env, "JOBS_COMPLETION_CALLS_MAX", COMPLETION_CALLS_MAX_DEFAULT, minimum=1),
        )
