"""`python -m worker_service`: one worker replica."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from datetime import UTC, datetime

from prometheus_client import disable_created_metrics

from durable_jobs.logs import AttemptLogHandler
from shared import event_loop
from shared.domain.errors import JobsError
from shared.env_settings import LOG_LEVEL_DEFAULT, SettingsError, split_host_port
from shared.garbage_collection import pace_garbage_collector
from shared.handlers.loader import load_registry
from shared.json_logging import configure_logging
from shared.storage.database import Database, PoolSettings
from worker_service.api_client import ApiClient, CredentialRejected
from worker_service.health_server import WorkerHealth, start_health_server
from worker_service.kind_publisher import KindPublisher
from worker_service.metrics import WorkerMetrics
from worker_service.settings import WorkerSettings
from worker_service.tracing import TRACING_AVAILABLE
from worker_service.worker import Worker

log = logging.getLogger("worker_service")
# The service's own loggers: what they say inside a handler's call (a checkpoint's report) is the
# replica's business, kept in its log only.
SERVICE_LOGGERS = ("worker_service", "shared", "durable_jobs", "grpc")


async def run(settings: WorkerSettings, stop: asyncio.Event | None = None) -> None:
    """Runs until SIGTERM or SIGINT, then drains. Given `stop`, runs until it is set and handles no
    signal: a replica embedded in another program (the tests')."""
    if stop is None:
        # First of all: a SIGTERM that arrives while the replica starts up is a stop, drained like any other.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    registry = load_registry(settings.handler_modules)
    metrics = WorkerMetrics(settings.metrics_tenant_limit)
    health = WorkerHealth(stall_seconds=settings.liveness_stall_seconds)
    health_server = None
    if settings.metrics_listen:
        host, port = split_host_port(settings.metrics_listen)
        health_server = start_health_server(host, port, metrics.registry, health)
    db = await Database.open(
        PoolSettings(
            settings.database.url,
            min_size=1,
            max_size=3,
            application_name="jobs-worker",
            prepare_threshold=settings.database.prepare_threshold,
            fault_injection=settings.database.fault_injection,
            utc_sessions=True,
        )
    )
    metrics.watch_pool(db.stats)
    publisher = KindPublisher(
        db,
        registry,
        settings.worker_id,
        datetime.now(UTC),
        metrics,
        interval_seconds=settings.kind_publish_interval_seconds,
    )
    # Before the first claim: the API accepts a kind only once some worker has published it.
    if not await publisher.publish_first(stop):
        await db.close()
        log.info("worker %s stopped before its job kinds could be published", settings.worker_id)
        return
    api = ApiClient(
        settings.api_target,
        settings.worker_token,
        settings.worker_id,
        settings.tls,
        max_result_bytes=settings.max_result_bytes,
    )
    log.info(
        "worker %s: %d slots, lease %.0fs, kinds %s",
        settings.worker_id,
        settings.concurrency,
        settings.lease_seconds,
        ", ".join(sorted(registry.kinds())),
    )
    log.info("attempt spans: %s", "on (opentelemetry-api)" if TRACING_AVAILABLE else "off (opentelemetry-api absent)")
    try:
        await Worker(settings, registry, db, api, metrics, publisher, health).run(stop)
    finally:
        await api.close()
        await db.close()
        if health_server:
            health_server.shutdown()
            health_server.server_close()
    log.info("worker %s stopped", settings.worker_id)


def main() -> int:
    # Until the settings are read, so that an error in them is logged too.
    configure_logging(LOG_LEVEL_DEFAULT, "worker_service")
    disable_created_metrics()
    try:
        settings = WorkerSettings.from_env(os.environ)
        configure_logging(settings.log_level, "worker_service")
        # Records that handlers' code makes while it runs are kept with the attempt too (the replica's
        # own loggers' are not: they are the service's, not the job's).
        logging.getLogger().addHandler(AttemptLogHandler(skipped=SERVICE_LOGGERS))
        pace_garbage_collector()
        event_loop.run(run(settings), os.environ)
        return 0
    except SettingsError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except CredentialRejected as exc:
        log.error("the API refused this worker's token: %s", exc)
        return 2
    except JobsError as exc:
        log.error("%s", exc.message)
        return 1


if __name__ == "__main__":
    sys.exit(main())
