"""The worker's HTTP listener: Prometheus metrics, and probes that tell a live process from a replica
that can actually claim and report.

- `/livez` fails when the event loop has not run for `stall_seconds` (a handler blocking it, a hung
  native call): heartbeats, claims and reports all run there, so such a replica is dead in effect.
- `/readyz` fails while the database or the API cannot be reached, and once the replica is draining.

The listener runs in threads of its own, so it answers (with the bad news) while the loop is stuck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from shared.pause import pause

LOOP_TICK_SECONDS = 0.5
LIVENESS_STALL_SECONDS_DEFAULT = 10.0
READINESS_PROBE_SECONDS = 2.0


@dataclass
class WorkerHealth:
    stall_seconds: float = LIVENESS_STALL_SECONDS_DEFAULT
    loop_seen_at: float = field(default_factory=time.monotonic)
    # Why the replica is not ready; empty when it is.
    not_ready: str = "starting"

    def live(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self.loop_seen_at
        if stalled > self.stall_seconds:
            return False, f"event loop blocked for {stalled:.1f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        live, why = self.live()
        if not live:
            return False, why
        return (not self.not_ready), self.not_ready or "ok"

    async def watch(
        self, database_ok: Callable[[], Any], api_ok: Callable[[], bool], draining: Callable[[], bool]
    ) -> None:
        """Ticks the loop's heartbeat, and probes the database and the API for readiness."""
        probed_at = float("-inf")
        while True:
            self.loop_seen_at = time.monotonic()
            if self.loop_seen_at - probed_at >= READINESS_PROBE_SECONDS:
                probed_at = self.loop_seen_at
                if draining():
                    self.not_ready = "draining"
                elif not await database_ok():
                    self.not_ready = "database unreachable"
                elif not api_ok():
                    self.not_ready = "API unreachable"
                else:
                    self.not_ready = ""
            await pause(LOOP_TICK_SECONDS)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Probes every few seconds would drown the log."""


def start_health_server(host: str, port: int, registry: CollectorRegistry, health: WorkerHealth) -> WSGIServer:
    """Serves /metrics, /livez and /readyz on a daemon thread until the returned server is shut down."""
    # prometheus_client annotates its app as a bare Callable; this is the WSGI signature it implements.
    metrics: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]] = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/livez", "/readyz"):
            ok, why = health.live() if path == "/livez" else health.ready()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [why.encode() + b"\n"]
        return metrics(environ, start_response)

    server = make_server(host, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="health-server", daemon=True).start()
    return server
