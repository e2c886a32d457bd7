"""The console's HTTP server, run on the API process's event loop beside the gRPC server."""

from __future__ import annotations

import logging

from aiohttp import web

from api_service.console.admin_pages import AdminPages
from api_service.console.pages import ConsolePages
from api_service.console.rendering import static_root, template_environment
from api_service.console.security import make_middlewares
from api_service.console.sessions import SessionStore
from api_service.console.settings import ConsoleSettings
from api_service.principals import PrincipalsFile
from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.admin_jobs import AdminJobs
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.operator_console import OperatorJobActions, OperatorReads
from shared.env_settings import split_host_port
from shared.storage.database import Database

log = logging.getLogger(__name__)
# A form carries a reason and a few fields; nothing larger is ever posted.
REQUEST_BYTES_MAX = 64 * 1024


class ConsoleServer:
    def __init__(self, settings: ConsoleSettings, principals: PrincipalsFile, db: Database) -> None:
        self._settings = settings
        sessions = SessionStore(idle_seconds=settings.session_idle_seconds, max_seconds=settings.session_max_seconds)
        templates = template_environment()
        admin_jobs = AdminJobs(db, JobQueries(db))
        pages = ConsolePages(
            templates, principals, sessions, OperatorReads(db), OperatorJobActions(db, JobLifecycle(db)), admin_jobs
        )
        admin_pages = AdminPages(templates, admin_jobs, AdminConfig(db))
        app = web.Application(
            middlewares=make_middlewares(principals, sessions, pages.error_page), client_max_size=REQUEST_BYTES_MAX
        )
        app.add_routes(pages.routes() + admin_pages.routes())
        app.router.add_static("/static", str(static_root()))
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        host, port = split_host_port(self._settings.listen)
        await web.TCPSite(self._runner, host, port).start()
        log.info("operator console on http://%s", self._settings.listen)

    async def stop(self) -> None:
        await self._runner.cleanup()
