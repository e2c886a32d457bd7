"""Builds and runs the gRPC server: services, interceptors, health, reflection, metrics, shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from api_service.admin_servicer import AdminServicer
from api_service.console.server import ConsoleServer
from api_service.health_monitor import HealthMonitor, not_serving_yet
from api_service.interceptors import ServiceInterceptor
from api_service.job_change_hub import JobChangeHub
from api_service.job_servicer import JobServicer
from api_service.metrics import ApiMetrics, keep_arrival_series
from api_service.principals import PrincipalsFile
from api_service.queue_gauges import QueueGaugeRefresher
from api_service.result_cache import ResultCache
from api_service.server_reflection import DescriptorFiles, ServerReflection
from api_service.settings import ApiSettings
from api_service.transport_security import ReloadableServerCredentials
from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.admin_jobs import AdminJobs
from api_service.usecases.admission import SubmissionAdmission
from api_service.usecases.child_jobs import ChildJobs
from api_service.usecases.delivery_sets import DeliverySets
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.job_watch import RECHECK_SECONDS_DEFAULT, JobWatch
from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.resources import ResourceDeletions
from api_service.usecases.schedule_runner import ScheduleRunner
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from api_service.worker_servicer import WorkerServicer
from jobs.v1 import admin_pb2, admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc, worker_pb2, worker_pb2_grpc
from shared.domain.errors import JobsError
from shared.env_settings import SettingsError, split_host_port
from shared.handlers.builtin import builtin_policies
from shared.pause import pause
from shared.storage import kind_store
from shared.storage.database import Database, PoolSettings
from shared.storage.queue_stats import ExporterSession

log = logging.getLogger(__name__)
HEALTH_CONCURRENT_RPCS_MAX = 16
# How often a WatchJob stream reads its job again when no LISTEN session can be had (transaction pooling
# without DATABASE_DIRECT_URL): a change reaches the stream within this long.
WATCH_POLL_SECONDS = 1.0


# A WatchJob stream open when its connection ages out is closed after this grace; clients resume it
# from the last sequence they saw.
CONNECTION_AGE_GRACE_SECONDS = 60
BUILTIN_PUBLISH_RETRY_SECONDS_MIN = 0.5
BUILTIN_PUBLISH_RETRY_SECONDS_MAX = 10.0


async def _publish_builtin_kinds(db: Database, published: asyncio.Event) -> None:
    """Makes the built-in kinds known (a worker's publication of them stands). Retried until the
    database answers: the API serves health, NOT_SERVING, and refuses what needs the database, until then."""
    delay = BUILTIN_PUBLISH_RETRY_SECONDS_MIN
    while True:
        try:
            async with db.transaction() as conn:
                await kind_store.publish_builtin(conn, builtin_policies())
            published.set()
            return
        except JobsError as exc:
            log.warning("could not publish the built-in job kinds yet: %s", exc.message)
        await pause(delay)
        delay = min(delay * 2, BUILTIN_PUBLISH_RETRY_SECONDS_MAX)


def _connection_age_options(seconds: float) -> list[tuple[str, int]]:
    if seconds <= 0:
        return []
    return [
        ("grpc.max_connection_age_ms", int(seconds * 1000)),
        ("grpc.max_connection_age_grace_ms", CONNECTION_AGE_GRACE_SECONDS * 1000),
    ]


async def serve(settings: ApiSettings, stop: asyncio.Event | None = None) -> None:
    """Runs until SIGTERM or SIGINT, then drains in-flight calls within the grace period. Given `stop`,
    runs until it is set and handles no signal: a server embedded in another program (the tests')."""
    if settings.ignored_handler_modules:
        log.warning(
            "JOBS_HANDLER_MODULES is ignored by the API (%s): the API learns job kinds from the workers",
            ", ".join(settings.ignored_handler_modules),
        )
    principals = PrincipalsFile(settings.tokens_file)
    tls = ReloadableServerCredentials(settings.tls) if settings.tls else None
    metrics = ApiMetrics(settings.metrics_tenant_limit)
    db = await Database.open(
        PoolSettings(
            settings.database.url,
            max_size=settings.db_pool_max,
            acquire_timeout_seconds=settings.db_acquire_timeout_seconds,
            application_name="jobs-api",
            prepare_threshold=settings.database.prepare_threshold,
            fault_injection=settings.database.fault_injection,
        )
    )
    metrics.watch_pool(db.stats)
    kinds = KindCatalog(db, max_staleness_seconds=settings.kind_cache_seconds)
    server = grpc.aio.server(
        interceptors=[ServiceInterceptor(principals.current, metrics.rpc)],
        options=[
            ("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
            ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
            *_connection_age_options(settings.max_connection_age_seconds),
        ],
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    hub = JobChangeHub(settings.database.session_url, db)
    # Without a session for LISTEN, WatchJob streams learn of changes by reading again this often.
    watch_recheck_seconds = RECHECK_SECONDS_DEFAULT if settings.database.session_url else WATCH_POLL_SECONDS
    queries = JobQueries(db, ResultCache(settings.result_cache, metrics.result_cache))
    submissions = SubmissionService(
        db, kinds, settings.limits, dedupe_window_seconds=settings.dedupe_window_seconds, metrics=metrics.submissions
    )
    admission = SubmissionAdmission(db, settings.tenant_limits)
    jobs_pb2_grpc.add_JobServiceServicer_to_server(
        JobServicer(
            submissions,
            queries,
            JobLifecycle(db),
            JobWatch(
                db,
                hub,
                watch_recheck_seconds,
                max_streams=settings.max_watch_streams,
                max_streams_per_tenant=settings.max_watch_streams_per_tenant,
            ),
            admission,
            deletions=ResourceDeletions(db),
            delivery_sets=DeliverySets(db, submissions),
            schedules=ScheduleService(db, kinds, settings.limits, submissions, admission),
        ),
        server,
    )
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerServicer(
            WorkerReports(
                db,
                metrics.reports,
                lease_max_seconds=settings.lease_max_seconds,
                max_result_bytes=settings.max_result_bytes,
                children=ChildJobs(db, submissions, metrics.submissions),
            )
        ),
        server,
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(AdminConfig(db), AdminJobs(db, queries)), server)
    health_servicer = health.aio.HealthServicer()
    await not_serving_yet(health_servicer)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    ServerReflection(
        DescriptorFiles.for_api(),
        (
            jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        ),
    ).add_to(server)
    if tls:
        port = server.add_secure_port(settings.listen, tls.credentials)
    else:
        port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise OSError(f"cannot listen on {settings.listen}")
    background = []
    probes = _health_only_server(settings.health_listen, health_servicer) if settings.health_listen else None
    metrics_server = None
    if settings.metrics_listen:
        host, metrics_port = split_host_port(settings.metrics_listen)
        metrics_server, _ = start_http_server(metrics_port, addr=host, registry=metrics.registry)
        background.append(asyncio.create_task(_queue_gauge_refresher(settings, metrics).run()))
        background.append(
            asyncio.create_task(
                keep_arrival_series(
                    metrics.submissions,
                    lambda: principals.current().tenants(),
                    kinds.known,
                    settings.metrics_refresh_seconds,
                )
            )
        )
    await server.start()
    if probes:
        await probes.start()
    console = ConsoleServer(settings.console, principals, db) if settings.console else None
    if console:
        await console.start()
    if stop is None:
        _reload_on_sighup(principals, tls)
    builtin_kinds_published = asyncio.Event()
    background += [
        asyncio.create_task(_publish_builtin_kinds(db, builtin_kinds_published)),
        asyncio.create_task(
            HealthMonitor(health_servicer, db, settings.health_interval_seconds, started=builtin_kinds_published).run()
        ),
        asyncio.create_task(hub.run()),
    ]
    if settings.scheduler_enabled:
        # In the API, not the workers: the API owns submissions (kinds, quotas, idempotency, the
        # jobs_api role that may insert jobs); every replica runs one and they share due rows.
        runner = ScheduleRunner(
            db,
            submissions,
            admission,
            poll_seconds=settings.scheduler_poll_seconds,
            fires_kept_seconds=settings.schedule_fires_kept_seconds,
            metrics=metrics.schedules,
        )
        background.append(asyncio.create_task(runner.run()))
    log.info(
        "API serving on %s (%s)%s",
        settings.listen,
        "plaintext" if not settings.tls else "mutual TLS" if settings.tls.client_ca_file else "TLS",
        f", health also on {settings.health_listen} (plaintext)" if settings.health_listen else "",
    )
    await (stop.wait() if stop is not None else _wait_for_stop_signal())
    log.info("shutting down: draining calls in flight for up to %.0fs", settings.shutdown_grace_seconds)
    drain_started = time.monotonic()
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await health_servicer.enter_graceful_shutdown()
    if console:
        await console.stop()
    await server.stop(settings.shutdown_grace_seconds)
    if probes:
        await probes.stop(None)
    await db.close()
    if metrics_server:
        metrics_server.shutdown()
        metrics_server.server_close()
    log.info("API stopped: drained in %.1fs", time.monotonic() - drain_started)


def _queue_gauge_refresher(settings: ApiSettings, metrics: ApiMetrics) -> QueueGaugeRefresher:
    session_url = settings.database.session_url
    assert session_url is not None, "ApiSettings refuses metrics without a session URL"
    return QueueGaugeRefresher(
        ExporterSession(session_url),
        metrics.queue,
        interval_seconds=settings.metrics_refresh_seconds,
        failed_window_seconds=settings.metrics_failed_window_seconds,
        tenant_limit=settings.metrics_tenant_limit,
    )


def _health_only_server(listen: str, health_servicer: health.aio.HealthServicer) -> grpc.aio.Server:
    """grpc.health.v1 alone, in plaintext: Kubernetes' gRPC probes speak no TLS. It tells nothing but
    SERVING or NOT_SERVING, so bind it where only the kubelet can reach it (the pod's address)."""
    probes = grpc.aio.server(maximum_concurrent_rpcs=HEALTH_CONCURRENT_RPCS_MAX)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probes)
    if probes.add_insecure_port(listen) == 0:
        raise OSError(f"cannot listen on {listen}")
    return probes


def _reload_on_sighup(principals: PrincipalsFile, tls: ReloadableServerCredentials | None) -> None:
    """SIGHUP re-reads the principals file and the TLS files; calls in flight are not disturbed, and a
    file that does not load leaves the previous one in force."""

    def reload() -> None:
        for name, reloader in (("principals", principals.reload), ("TLS", tls.reload if tls else None)):
            if reloader is None:
                continue
            try:
                reloader()
                log.info("reloaded the %s file(s)", name)
            except SettingsError as exc:
                log.error("kept the previous %s configuration: %s", name, exc)

    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)


async def _wait_for_stop_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
