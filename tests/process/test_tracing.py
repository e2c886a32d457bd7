"""W3C trace context from SubmitJob's metadata to the handler, and each attempt as a span: a child of
the submitter's span on the first attempt, linked to it on retries; nothing changes without
OpenTelemetry. Against the real API process; the traced worker runs in process so that its spans
reach opentelemetry-sdk's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime

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
from tests.process_fixtures import FAST_WORKER_ENV, WORKER_TOKEN, ServiceStack
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
