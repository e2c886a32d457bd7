"""The console's pages and actions: thin handlers that read the request, call a use-case, render."""

from __future__ import annotations

import hashlib
import secrets
import urllib.parse
from typing import Any

import jinja2
from aiohttp import web

from api_service.console import search_form
from api_service.console.rendering import QueueChart, render
from api_service.console.security import (
    OPERATOR_ROLES,
    SESSION_COOKIE,
    SIGNIN_CSRF_COOKIE,
    Operator,
    operator_of,
    set_cookie,
)
from api_service.console.sessions import SessionStore
from api_service.principals import PrincipalsFile
from api_service.usecases.admin_jobs import AdminJobs
from api_service.usecases.operator_console import OperatorJobActions, OperatorReads
from shared.domain.errors import FailedPrecondition, FieldViolation, InvalidArgument, PermissionDenied
from shared.domain.ids import JobId
from shared.domain.jobs import JobState

RETRYABLE = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.OUTCOME_UNKNOWN})
SIGNIN_CSRF_MAX_AGE_SECONDS = 3600


class ConsolePages:
    def __init__(
        self,
        templates: jinja2.Environment,
        principals: PrincipalsFile,
        sessions: SessionStore,
        reads: OperatorReads,
        actions: OperatorJobActions,
        admin_jobs: AdminJobs,
    ) -> None:
        self._templates = templates
        self._principals = principals
        self._sessions = sessions
        self._reads = reads
        self._actions = actions
        self._admin_jobs = admin_jobs
        self._chart = QueueChart()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/signin", self.signin_form),
            web.post("/signin", self.signin),
            web.post("/signout", self.signout),
            web.get("/queues", self.queues),
            web.get("/queues/live", self.queues_live),
            web.get("/jobs", self.jobs),
            web.get("/jobs/{job_id}", self.job),
            web.get("/jobs/{job_id}/live", self.job_live),
            web.post("/jobs/{job_id}/cancel", self.cancel),
            web.post("/jobs/{job_id}/retry", self.retry),
        ]

    def page(self, request: web.Request, name: str, http_status: int = 200, **context: object) -> web.Response:
        operator = request.get("operator")
        flash = operator.session.take_flash() if isinstance(operator, Operator) else []
        return render(self._templates, name, http_status, operator=operator, flash=flash, path=request.path, **context)

    def error_page(self, request: web.Request, status: int, message: str) -> web.Response:
        if request.headers.get("HX-Request"):
            return render(self._templates, "error_fragment.html", status, status=status, message=message)
        return self.page(request, "error.html", status, status=status, message=message)

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/queues")

    async def signin_form(self, request: web.Request, message: str = "", http_status: int = 200) -> web.StreamResponse:
        # The same token for every sign-in page of this browser, so that a second tab (or the browser's
        # own favicon request, sent here too) does not make the first one's form stale.
        token = request.cookies.get(SIGNIN_CSRF_COOKIE) or secrets.token_urlsafe(32)
        response = self.page(request, "signin.html", http_status, csrf_token=token, message=message)
        set_cookie(response, SIGNIN_CSRF_COOKIE, token, max_age=SIGNIN_CSRF_MAX_AGE_SECONDS)
        return response

    async def signin(self, request: web.Request) -> web.StreamResponse:
        """Only an admin or read-only admin token opens a session; a tenant's or a worker's is refused
        with the same answer as an unknown one."""
        token = str((await request.post()).get("token", "")).strip()
        principal = self._principals.current().authenticate(token) if token else None
        if principal is None or principal.role not in OPERATOR_ROLES:
            return await self.signin_form(request, "This token does not belong to an operator.", http_status=403)
        session_id, _ = self._sessions.start(hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest())
        response = web.HTTPSeeOther("/queues")
        set_cookie(response, SESSION_COOKIE, session_id)
        response.del_cookie(SIGNIN_CSRF_COOKIE, path="/")
        raise response

    async def signout(self, request: web.Request) -> web.StreamResponse:
        self._sessions.end(operator_of(request).session_id)
        response = web.HTTPSeeOther("/signin")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    async def queues(self, request: web.Request) -> web.StreamResponse:
        return self.page(request, "queues.html", **await self._queue_context())

    async def queues_live(self, request: web.Request) -> web.StreamResponse:
        return render(self._templates, "queues_live.html", **await self._queue_context())

    async def _queue_context(self) -> dict[str, Any]:
        lines = await self._reads.queues()
        self._chart.record(lines)
        return {"lines": lines, "chart": self._chart.polylines()}

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        search = search_form.parse_search(request.query)
        after = search_form.decode_cursor(request.query.get("after"))
        size = search_form.page_size(request.query)
        page = await self._admin_jobs.search(search, after, size)
        next_query = None
        if page.next_cursor is not None:
            next_query = [(k, v) for k, v in request.query.items() if k != "after"]
            next_query.append(("after", search_form.encode_cursor(page.next_cursor)))
        return self.page(
            request,
            "jobs.html",
            query=request.query,
            filter_query=urllib.parse.urlencode(
                [(k, v) for k, v in request.query.items() if k not in ("after", "size")]
            ),
            page=page,
            size=size,
            sizes=search_form.PAGE_SIZES,
            next_query=next_query,
            first_query=[(k, v) for k, v in request.query.items() if k != "after"],
            first_page=after is None,
        )

    async def job(self, request: web.Request) -> web.StreamResponse:
        after = request.query.get("dependents_after") or None
        children_after = request.query.get("children_after") or None
        detail = await self._reads.job(
            JobId(request.match_info["job_id"]),
            dependents_after=JobId(after) if after else None,
            children_after=JobId(children_after) if children_after else None,
        )
        return self.page(request, "job.html", detail=detail, retryable=RETRYABLE)

    async def job_live(self, request: web.Request) -> web.StreamResponse:
        """Polled by the job page with the version it shows (sequence and progress): nothing (204) while
        the job is unchanged, else a refresh of the whole page, so its actions and result are never stale."""
        detail = await self._reads.job(JobId(request.match_info["job_id"]))
        if request.query.get("version") == detail.version:
            return web.Response(status=204)
        return web.Response(status=200, headers={"HX-Refresh": "true"})

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        operator, job_id, reason = await self._action_input(request)
        try:
            job = await self._actions.cancel(operator.name, job_id, reason)
            operator.session.flash.append(("ok", f"Cancel recorded: the job is {job.state.value}."))
        except FailedPrecondition as exc:
            operator.session.flash.append(("error", exc.message))
        raise web.HTTPSeeOther(f"/jobs/{job_id}")

    async def retry(self, request: web.Request) -> web.StreamResponse:
        operator, job_id, reason = await self._action_input(request)
        form = await request.post()
        accept = form.get("accept_duplicate_risk") == "yes"
        fresh = form.get("clear_checkpoints") == "yes"
        try:
            job = await self._actions.retry(
                operator.name, job_id, reason, accept_duplicate_risk=accept, clear_checkpoints=fresh
            )
            operator.session.flash.append(("ok", f"Retry recorded: the job is {job.state.value} again."))
        except FailedPrecondition as exc:
            operator.session.flash.append(("error", exc.message))
        raise web.HTTPSeeOther(f"/jobs/{job_id}")

    async def _action_input(self, request: web.Request) -> tuple[Operator, JobId, str]:
        operator, reason = await writer_and_reason(request)
        return operator, JobId(request.match_info["job_id"]), reason


async def writer_and_reason(request: web.Request) -> tuple[Operator, str]:
    """The operator of a request that changes something, and the reason it gives; a read-only
    operator is refused whatever the page offered."""
    operator = operator_of(request)
    if operator.read_only:
        raise PermissionDenied("a read-only operator cannot change anything")
    reason = str((await request.post()).get("reason", "")).strip()
    if not reason:
        raise InvalidArgument(FieldViolation("reason", "say why: it is recorded with your name"))
    return operator, reason
