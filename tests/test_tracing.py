"""W3C trace context from SubmitJob's metadata to the handler, and each attempt as a span: a child of
the submitter's span on the first attempt, linked to it on retries; nothing changes without
OpenTelemetry. Against the real API process; the traced worker runs in process so that its spans
reach opentelemetry-sdk's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from jobs.v1 import jobs_pb2
from shared.handlers import HandlerRegistry, JobContext
from shared.storage.database import Database, PoolSettings
from tests import factories, handlers_for_tests
from tests.conditions import wait_until
from tests.dashboard_queries import load_dashboard, panel_queries, substitute
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.process_fixtures import FAST_WORKER_ENV, WORKER_TOKEN, ServiceProcess, ServiceStack
from tests.process_fixtures import wait_until as wait_until_sync
from worker_service.api_client import ApiClient
from worker_service.health_server import WorkerHealth
from worker_service.kind_publisher import KindPublisher
from worker_service.metrics import WorkerMetrics
from worker_service.settings import WorkerSettings
from worker_service.tracing import MESSAGING_SYSTEM, AttemptTracer
from worker_service.worker import Worker

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

KIND = handlers_for_tests.TRACED_KIND
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
HANDLER_SPAN = "handler work"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _headers_of(span: trace.Span) -> tuple[tuple[str, str], ...]:
    """What OpenTelemetry's gRPC client instrumentation sends: the W3C propagator's headers."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return (*carrier.items(), ("tracestate", TRACESTATE))


def _submit(stack: ServiceStack, payload: dict, headers: tuple[tuple[str, str], ...], **fields) -> jobs_pb2.Job:
    client = stack.tenant("acme")
    response = client.stub.SubmitJob(
        jobs_pb2.SubmitJobRequest(kind=KIND, payload=json.dumps(payload).encode(), **fields),
        metadata=client.metadata + headers,
        timeout=10,
    )
    return response.job


def _traced_registry(provider: TracerProvider) -> HandlerRegistry:
    """The test kind, with a handler that opens a span of its own, as an instrumented library would."""
    registry = HandlerRegistry()

    @registry.register(KIND, max_attempts=3, backoff_base_seconds=0.1)
    async def traced(ctx: JobContext) -> bytes:
        with provider.get_tracer("handler").start_as_current_span(HANDLER_SPAN):
            return await handlers_for_tests.traced(ctx)

    return registry


async def _publish(stack: ServiceStack, registry: HandlerRegistry) -> None:
    """Publishes the registry's kinds as the in-process worker will, so the API accepts them before it runs."""
    db = await Database.open(PoolSettings(stack.database_url, min_size=1, max_size=1))
    try:
        await factories.published_kinds(db, registry)
    finally:
        await db.close()


async def _run_worker_until(stack: ServiceStack, registry: HandlerRegistry, tracer: AttemptTracer, done) -> None:
    settings = WorkerSettings.from_env(
        {
            "DATABASE_URL": stack.database_url,
            "JOBS_API_TARGET": stack.api_target,
            "JOBS_WORKER_TOKEN": WORKER_TOKEN,
            "JOBS_WORKER_ID": "in-process",
            **FAST_WORKER_ENV,
        }
    )
    db = await Database.open(PoolSettings(settings.database.url, min_size=1, max_size=3))
    api = ApiClient(settings.api_target, settings.worker_token, settings.worker_id, settings.tls)
    stop = asyncio.Event()
    metrics = WorkerMetrics(tenant_limit=5)
    publisher = KindPublisher(db, registry, settings.worker_id, datetime.now(UTC), metrics)
    await publisher.publish()
    worker = Worker(settings, registry, db, api, metrics, publisher, WorkerHealth(), tracer)
    running = asyncio.create_task(worker.run(stop))
    try:
        await wait_until(done, within_seconds=40, what="the job's attempts to end")
    finally:
        stop.set()
        await running
        await api.close()
        await db.close()


def _attempt_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    found = [s for s in exporter.get_finished_spans() if s.name == f"process {KIND}"]
    return sorted(found, key=_attempt_of)


def _attempt_of(span: ReadableSpan) -> int:
    attempt = (span.attributes or {}).get("jobs.attempt")
    assert isinstance(attempt, int), f"{span.name} has no jobs.attempt"
    return attempt


async def test_the_first_attempt_is_a_child_of_the_submitter_and_a_retry_links_to_it(
    service_stack: ServiceStack, spans
) -> None:
    provider, exporter = spans
    service_stack.start_api()
    await _publish(service_stack, _traced_registry(provider))
    with provider.get_tracer("caller").start_as_current_span("submit", kind=trace.SpanKind.CLIENT) as caller:
        job = await asyncio.to_thread(_submit, service_stack, {"fail_times": 1}, _headers_of(caller))
    submitter = caller.get_span_context()

    await _run_worker_until(
        service_stack, _traced_registry(provider), AttemptTracer(provider), lambda: len(_attempt_spans(exporter)) == 2
    )

    first, retry = _attempt_spans(exporter)
    for span, attempt in ((first, 1), (retry, 2)):
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.attributes["messaging.system"] == MESSAGING_SYSTEM
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["messaging.destination.name"] == KIND
        assert span.attributes["messaging.message.id"] == job.job_id
        assert (span.attributes["jobs.job_id"], span.attributes["jobs.kind"]) == (job.job_id, KIND)
        assert span.attributes["jobs.attempt"] == attempt
    # The first attempt continues the submitter's trace, its tracestate included.
    assert first.parent is not None
    assert first.parent.span_id == submitter.span_id and first.parent.is_remote
    assert first.context.trace_id == submitter.trace_id
    assert first.context.trace_state.get("congo") == "t61rcWkgMzE"
    assert first.links == ()
    assert first.status.status_code is trace.StatusCode.ERROR
    assert first.attributes["error.type"] == "retryable"
    assert [event.name for event in first.events] == ["exception"]
    # The retry is a trace of its own, linked to the submitter's span.
    assert retry.parent is None and retry.context.trace_id != submitter.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in retry.links] == [
        (submitter.trace_id, submitter.span_id)
    ]
    assert retry.status.status_code is trace.StatusCode.UNSET
    # The handler's own spans nest under the attempt's.
    handler_spans = [s for s in exporter.get_finished_spans() if s.name == HANDLER_SPAN]
    assert sorted(s.parent.span_id for s in handler_spans) == sorted(s.context.span_id for s in (first, retry))

    result = await asyncio.to_thread(service_stack.tenant("acme").result, job.job_id)
    traceparent = f"00-{submitter.trace_id:032x}-{submitter.span_id:016x}-{int(submitter.trace_flags):02x}"
    assert json.loads(result.payload) == {"traceparent": traceparent, "tracestate": TRACESTATE}


async def test_a_job_submitted_without_trace_context_gets_a_root_span_per_attempt(
    service_stack: ServiceStack, spans
) -> None:
    provider, exporter = spans
    service_stack.start_api()
    await _publish(service_stack, _traced_registry(provider))
    job = await asyncio.to_thread(_submit, service_stack, {}, ())

    await _run_worker_until(
        service_stack, _traced_registry(provider), AttemptTracer(provider), lambda: len(_attempt_spans(exporter)) == 1
    )

    (span,) = _attempt_spans(exporter)
    assert span.parent is None and span.links == ()
    assert span.attributes["messaging.message.id"] == job.job_id
    result = await asyncio.to_thread(service_stack.tenant("acme").result, job.job_id)
    assert json.loads(result.payload) == {"traceparent": None, "tracestate": None}


def _stored_trace_context(database_url: str, job_id: str) -> tuple[str | None, str | None]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT traceparent, tracestate FROM jobs WHERE job_id = %s", (job_id,)).fetchone()
    return row[0], row[1]


def test_without_opentelemetry_the_worker_runs_jobs_and_hands_the_context_to_the_handler(
    service_stack: ServiceStack,
) -> None:
    service_stack.start_api()
    worker = service_stack.start_worker(
        "w-plain", module="tests.worker_without_opentelemetry", JOBS_HANDLER_MODULES="tests.handlers_for_tests"
    )
    # The line after the one start_worker waits for: it may not be written yet.
    wait_until_sync(
        lambda: "attempt spans: off (opentelemetry-api absent)" in worker.log_text(),
        timeout=10,
        what="the worker to say attempt spans are off",
    )
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    headers = (("traceparent", traceparent), ("tracestate", TRACESTATE))

    retried = _submit(service_stack, {"fail_times": 1}, headers, idempotency_key="order-1")
    # Another trace resubmitting the same request is a replay: the trace context is no part of it.
    other = (("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)
    replay = service_stack.tenant("acme").stub.SubmitJob(
        jobs_pb2.SubmitJobRequest(kind=KIND, payload=b'{"fail_times": 1}', idempotency_key="order-1"),
        metadata=service_stack.tenant("acme").metadata + other,
        timeout=10,
    )
    # W3C receivers ignore a malformed traceparent: the job is accepted, without trace context.
    malformed = _submit(
        service_stack, {}, (("traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),)
    )

    assert replay.job.job_id == retried.job_id and not replay.created
    client = service_stack.tenant("acme")
    for job in (retried, malformed):

        def succeeded(job: jobs_pb2.Job = job) -> bool:
            return client.get(job.job_id).state == jobs_pb2.JOB_STATE_SUCCEEDED

        wait_until_sync(
            succeeded,
            timeout=30,
            what=f"job {job.job_id} to succeed",
        )
    assert client.get(retried.job_id).attempts == 2
    assert json.loads(client.result(retried.job_id).payload) == {"traceparent": traceparent, "tracestate": TRACESTATE}
    assert json.loads(client.result(malformed.job_id).payload) == {"traceparent": None, "tracestate": None}
    assert _stored_trace_context(service_stack.database_url, retried.job_id) == (traceparent, TRACESTATE)


OTEL_INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# `# {span_id="...",trace_id="..."} value timestamp` after a bucket's count.
_EXEMPLAR = re.compile(r'^(\w+)_bucket\{kind="([^"]+)",le="[^"]+"\} \S+ # \{span_id="(\w+)",trace_id="(\w+)"\}')
CALLER_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _instrumented_worker_env(receiver: OtlpReceiver) -> dict[str, str]:
    """What an operator sets for `opentelemetry-instrument python -m worker_service` (docs/METRICS.md)."""
    return {
        "OTEL_SERVICE_NAME": "jobs-worker",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        # Exported within a tenth of a second rather than five, so the test waits less.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "JOBS_HANDLER_MODULES": "tests.handlers_for_tests",
    }


def _openmetrics_exemplars(worker: ServiceProcess) -> list[tuple[str, str, str, str]]:
    """(histogram, kind, span id, trace id) of every exemplar in the worker's OpenMetrics exposition,
    fetched as Prometheus asks for it."""
    request = urllib.request.Request(f"http://127.0.0.1:{worker.metrics_port}/metrics", headers={"Accept": OPENMETRICS})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    return [match.groups() for line in text.splitlines() if (match := _EXEMPLAR.match(line))]  # type: ignore[misc]


def _attempt_spans_of(spans: list[ReceivedSpan], job_id: str) -> list[ReceivedSpan]:
    found = [s for s in spans if s.name.startswith("process ") and s.attributes.get("messaging.message.id") == job_id]
    return sorted(found, key=lambda s: s.attributes["jobs.attempt"])


def test_every_handler_shape_nests_its_spans_under_the_attempt_at_an_otlp_collector_and_exemplars_name_them(
    service_stack: ServiceStack, otlp_receiver: OtlpReceiver, start_prometheus
) -> None:
    service_stack.start_api()
    worker = service_stack.start_worker(
        "w-otel", launcher=[str(OTEL_INSTRUMENT)], **_instrumented_worker_env(otlp_receiver)
    )
    prometheus = start_prometheus(None, [worker], exemplars=True)
    started_at = time.time()
    client = service_stack.tenant("acme")
    jobs = {}
    for executor, kind in handlers_for_tests.SPAN_KINDS.items():
        # Each fails once: the first attempt continues the caller's trace, the retry links to it.
        jobs[executor] = client.stub.SubmitJob(
            jobs_pb2.SubmitJobRequest(kind=kind, payload=b'{"fail_times": 1}'),
            metadata=client.metadata + (("traceparent", CALLER_TRACEPARENT),),
            timeout=10,
        ).job
    for job in jobs.values():
        wait_until_sync(
            lambda job=job: client.get(job.job_id).state == jobs_pb2.JOB_STATE_SUCCEEDED,
            timeout=30,
            what=f"{job.kind} to succeed",
        )

    def all_spans_received() -> bool:
        spans = otlp_receiver.received()
        handler_spans = [s for s in spans if s.name == handlers_for_tests.HANDLER_SPAN]
        return len(handler_spans) == 6 and all(len(_attempt_spans_of(spans, j.job_id)) == 2 for j in jobs.values())

    wait_until_sync(all_spans_received, timeout=20, interval=0.1, what="the collector to receive every span")
    spans = otlp_receiver.received()
    _, caller_trace, caller_span, _ = CALLER_TRACEPARENT.split("-")
    for executor, job in jobs.items():
        first, retry = _attempt_spans_of(spans, job.job_id)
        assert (first.trace_id, first.parent_span_id) == (caller_trace, caller_span), executor
        assert retry.parent_span_id == "" and retry.links == ((caller_trace, caller_span),), executor
        for attempt in (first, retry):
            nested = [
                s for s in spans if s.name == handlers_for_tests.HANDLER_SPAN and s.parent_span_id == attempt.span_id
            ]
            assert len(nested) == 1, f"the {executor} handler's span of attempt {attempt.attributes['jobs.attempt']}"
            assert nested[0].trace_id == attempt.trace_id and nested[0].service == "jobs-worker"
        report = json.loads(client.result(job.job_id).payload)
        assert report["current"] == [retry.trace_id, retry.span_id], f"in the {executor} handler"
        assert report["traceparent"] == CALLER_TRACEPARENT
    assert len({json.loads(client.result(j.job_id).payload)["pid"] for j in jobs.values()}) == 2, (
        "the process handler ran in a process of its own"
    )

    # The worker's OpenMetrics scrape names attempts the collector received, in both latency histograms.
    attempts = {(s.trace_id, s.span_id) for s in spans if s.name.startswith("process ")}
    exemplars = [e for e in _openmetrics_exemplars(worker) if e[1] in handlers_for_tests.SPAN_KINDS.values()]
    for histogram in ("jobs_queue_wait_seconds", "jobs_execution_seconds"):
        named = {kind for name, kind, _, _ in exemplars if name == histogram}
        assert named == set(handlers_for_tests.SPAN_KINDS.values()), f"{histogram} exemplars: {exemplars}"
    assert {(trace_id, span_id) for _, _, span_id, trace_id in exemplars} <= attempts, exemplars

    # And through Prometheus, as Grafana asks for the latency panels' exemplars: one click to a trace.
    dashboard = load_dashboard()
    latency = [q for q in panel_queries(dashboard) if q.exemplar]
    assert {q.panel for q in latency} == {"Queue wait percentiles", "Execution time percentiles"}
    for query in latency:
        expr = substitute(
            dashboard, query.expr, selected={"tenant": None, "kind": None}, range_seconds=300, scrape_seconds=1
        )

        def stored(expr: str = expr) -> list[dict]:
            return prometheus.query_exemplars(expr, started_at - 60, time.time() + 60)

        found = wait_until_sync(stored, timeout=15, interval=0.2, what=f"prometheus to store exemplars of {expr}")
        traces = {e["labels"]["trace_id"] for series in found for e in series["exemplars"]}
        assert traces and traces <= {trace for trace, _ in attempts}, (query.panel, traces)
