"""A real OTLP/HTTP trace receiver on loopback: what a collector, Tempo or Jaeger listens with, keeping
the spans it is sent, decoded with opentelemetry-proto's messages."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id) of each link
    status_code: int
    service: str  # the exporting process's service.name


@dataclass
class OtlpReceiver:
    port: int
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        """OTEL_EXPORTER_OTLP_ENDPOINT: the exporter appends /v1/traces itself."""
        return f"http://127.0.0.1:{self.port}"

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def accept(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                            status_code=span.status.code,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        with self._lock:
            self.spans.extend(found)
            self.requests += 1


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind in ("string_value", "int_value", "bool_value", "double_value") else None


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != TRACES_PATH or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404 if self.path != TRACES_PATH else 415)
                return
            receiver.accept(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            """Quiet: every export would print a line."""

    return Handler


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(port=0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(receiver))
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
