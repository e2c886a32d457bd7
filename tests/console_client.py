"""The operator console from the tests' side: its principals, a started stack with the console on, and
a plain HTTP client that keeps cookies by hand (the console's cookies are Secure, which Python's cookie
jar will not send over http:// even to loopback, as browsers do)."""

from __future__ import annotations

import http.client
import re
import urllib.parse
from dataclasses import dataclass, field

from tests.process_fixtures import ServiceStack, free_port

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def start_with_console(stack: ServiceStack, **env: str) -> str:
    """Starts the API with its console on a free port; returns the console's base URL. The stack's
    principals include the operators ADMIN_TOKEN ("admin:ops") and READONLY_TOKEN ("admin:console")."""
    listen = f"127.0.0.1:{free_port()}"
    stack.start_api(JOBS_CONSOLE_LISTEN=listen, **env)
    return f"http://{listen}"


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: str

    def header(self, name: str) -> str:
        return self.headers.get(name, "")

    def set_cookies(self) -> list[str]:
        return self.headers.get_all("Set-Cookie") or []


@dataclass
class ConsoleClient:
    base_url: str
    cookies: dict[str, str] = field(default_factory=dict)

    def request(self, method: str, path: str, form: dict[str, str] | None, headers: dict[str, str]) -> Answer:
        parts = urllib.parse.urlsplit(self.base_url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        body = urllib.parse.urlencode(form) if form is not None else None
        all_headers = {k.replace("_", "-"): v for k, v in headers.items()}
        if body is not None:
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        if self.cookies:
            all_headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            conn.request(method, path, body=body, headers=all_headers)
            response = conn.getresponse()
            answer = Answer(response.status, response.headers, response.read().decode("utf-8", "replace"))
        finally:
            conn.close()
        for cookie in answer.set_cookies():
            name, _, rest = cookie.partition("=")
            value = rest.split(";", 1)[0]
            if value in ("", '""') or "Max-Age=0" in cookie:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return answer

    def get(self, path: str, **headers: str) -> Answer:
        return self.request("GET", path, None, headers)

    def post(self, path: str, form: dict[str, str], **headers: str) -> Answer:
        return self.request("POST", path, form, headers)

    def csrf_token(self, path: str) -> str:
        found = _CSRF.search(self.get(path).body)
        assert found, f"no CSRF token on {path}"
        return found.group(1)

    def sign_in(self, token: str) -> Answer:
        return self.post("/signin", {"token": token, "csrf_token": self.csrf_token("/signin")})
