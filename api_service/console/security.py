"""The console's guards, as aiohttp middlewares: security headers on every answer, a session for every
page but sign-in and static files, a CSRF token on every action, and the one place where the domain's
errors become HTTP answers."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from api_service.console.sessions import ConsoleSession, SessionStore
from api_service.principals import Principal, PrincipalsFile, Role
from shared.domain.errors import InvalidArgument, JobsError, NotFound, PermissionDenied

log = logging.getLogger(__name__)

SESSION_COOKIE = "jobs_console_session"
# Before sign-in there is no session to hold a CSRF token: the sign-in form echoes this cookie instead
# (double submit), so another site cannot sign a browser in with the attacker's token.
SIGNIN_CSRF_COOKIE = "jobs_console_signin"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
OPERATOR_ROLES = frozenset({Role.ADMIN, Role.ADMIN_READONLY})
# Nothing inline, nothing from elsewhere: scripts, styles and images come from /static only, and no
# other site may frame the console or receive its forms.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: under it browsers send `Origin: null` with same-site form posts, and the
    # Origin check below needs the real one. Other sites still learn nothing of the console's URLs.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
PUBLIC_PATHS = frozenset({"/signin"})
SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Operator:
    """The signed-in principal of one request."""

    principal: Principal
    session: ConsoleSession
    session_id: str

    @property
    def name(self) -> str:
        return self.principal.name

    @property
    def read_only(self) -> bool:
        return self.principal.role is not Role.ADMIN


def operator_of(request: web.Request) -> Operator:
    operator: Operator = request["operator"]
    return operator


def set_cookie(response: web.StreamResponse, name: str, value: str, *, max_age: int | None = None) -> None:
    """Secure even over plain HTTP: browsers keep Secure cookies for loopback addresses (a secure
    context), and anywhere else the console belongs behind TLS (docs/CONSOLE.md)."""
    response.set_cookie(name, value, httponly=True, secure=True, samesite="Strict", path="/", max_age=max_age)


def make_middlewares(
    principals: PrincipalsFile, sessions: SessionStore, render_error: Callable[[web.Request, int, str], web.Response]
) -> list[Middleware]:
    @web.middleware
    async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = exc
        response.headers.update(SECURITY_HEADERS)
        if not request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    @web.middleware
    async def domain_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except NotFound as exc:
            return render_error(request, 404, exc.message)
        except InvalidArgument as exc:
            return render_error(request, 400, exc.message)
        except PermissionDenied as exc:
            return render_error(request, 403, exc.message)
        except JobsError as exc:
            log.warning("console request failed: %s", exc.message)
            return render_error(request, 503, exc.message)

    @web.middleware
    async def signed_in(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PUBLIC_PATHS or request.path.startswith("/static/"):
            return await handler(request)
        operator = _operator(request, principals, sessions)
        if operator is None:
            if request.headers.get("HX-Request"):
                # A poll from a page whose session ended: the whole page goes to sign-in, not the fragment.
                raise web.HTTPUnauthorized(headers={"HX-Redirect": "/signin"})
            raise web.HTTPSeeOther("/signin")
        request["operator"] = operator
        return await handler(request)

    @web.middleware
    async def csrf(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in SAFE_METHODS:
            return await handler(request)
        if not _same_origin(request):
            return render_error(request, 403, "the request came from another site")
        form = await request.post()
        sent = str(form.get(CSRF_FIELD, "")) or request.headers.get(CSRF_HEADER, "")
        if request.path in PUBLIC_PATHS:
            expected = request.cookies.get(SIGNIN_CSRF_COOKIE, "")
        else:
            expected = operator_of(request).session.csrf_token
        if not sent or not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
            return render_error(request, 403, "the form's security token is missing or stale; reload the page")
        return await handler(request)

    return [security_headers, domain_errors, signed_in, csrf]


def _operator(request: web.Request, principals: PrincipalsFile, sessions: SessionStore) -> Operator | None:
    """The session's principal as the principals file says now: a token removed or demoted there
    (and the file reloaded) ends the session at its next request."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        return None
    session = sessions.find(session_id)
    if session is None:
        return None
    principal = principals.current().by_digest(session.token_digest)
    if principal is None or principal.role not in OPERATOR_ROLES:
        sessions.end(session_id)
        return None
    return Operator(principal, session, session_id)


def _same_origin(request: web.Request) -> bool:
    """Browsers send Origin with every POST; one naming another host is refused whatever the token."""
    origin = request.headers.get("Origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.host
