"""The attempt's span is the current span inside a handler of every shape (a coroutine on the event
loop, a plain def in the thread pool, a plain def in a child process), and the latency histograms
carry its trace as an exemplar in the OpenMetrics exposition. In process; the stack tier's
test_tracing_collector.py follows the same through the real processes to an OTLP/HTTP receiver."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from prometheus_client.openmetrics.exposition import generate_latest

from shared.domain.ids import FencingToken, JobId, TenantId
from shared.handlers import HandlerRegistry, JobContext
from tests import handlers_for_tests
from worker_service.handler_executors import HandlerExecutors
from worker_service.metrics import WorkerMetrics
from worker_service.tracing import AttemptSpan

pytestmark = pytest.mark.timeout(60)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    yield provider
    provider.shutdown()


def _context(kind: str) -> JobContext:
    return JobContext(
        job_id=JobId("job-1"),
        tenant=TenantId("acme"),
        kind=kind,
        payload=b"{}",
        attempt=1,
        max_attempts=2,
        fencing_token=FencingToken(1),
        traceparent=TRACEPARENT,
    )


def _ids(span: trace.Span) -> list[str]:
    context = span.get_span_context()
    return [f"{context.trace_id:032x}", f"{context.span_id:016x}"]


@pytest.mark.parametrize("executor", ["async", "thread", "process"])
async def test_the_span_current_around_a_handler_is_current_inside_it(provider, executor: str) -> None:
    registry = HandlerRegistry()
    handlers_for_tests.register(registry)
    kind = handlers_for_tests.SPAN_KINDS[executor]
    spec = registry.get(kind)
    assert spec is not None and spec.executor.value == executor
    executors = HandlerExecutors(threads=2, preload_modules=["tests.handlers_for_tests"])
    try:
        with provider.get_tracer("test").start_as_current_span(f"process {kind}") as attempt:
            result = await executors.run(spec, _context(kind))
    finally:
        executors.close()

    report = json.loads(result)  # type: ignore[arg-type]
    assert report["current"] == _ids(attempt), f"the {executor} handler ran outside the attempt's span"
    assert report["traceparent"] == TRACEPARENT, "the handler sees the job's stored trace context"
    assert (report["pid"] != os.getpid()) is (executor == "process")


def test_an_exemplar_names_a_sampled_attempt_span_and_none_an_unsampled_one(provider) -> None:
    with provider.get_tracer("test").start_as_current_span("process echo") as sampled:
        assert AttemptSpan(sampled).exemplar() == dict(zip(("trace_id", "span_id"), _ids(sampled), strict=True))
    unsampled_provider = TracerProvider(sampler=ALWAYS_OFF)
    with unsampled_provider.get_tracer("test").start_as_current_span("process echo") as unsampled:
        assert AttemptSpan(unsampled).exemplar() is None
    assert AttemptSpan().exemplar() is None
    # Without a tracer provider the span is the submitter's, carried along but recorded nowhere here.
    submitters = trace.NonRecordingSpan(sampled.get_span_context())
    assert submitters.get_span_context().trace_flags.sampled
    assert AttemptSpan(submitters).exemplar() is None


def test_the_latency_histograms_carry_the_exemplar_in_the_openmetrics_exposition() -> None:
    metrics = WorkerMetrics(tenant_limit=5)
    metrics.know_kinds(["echo"])
    exemplar = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}

    metrics.observe_queue_wait("echo", 0.2, exemplar)
    metrics.observe_execution("echo", 0.02, exemplar)

    lines = generate_latest(metrics.registry).decode().splitlines()
    labels = '{span_id="00f067aa0ba902b7",trace_id="4bf92f3577b34da6a3ce929d0e0e4736"}'
    # The bucket, its count, then `# {exemplar labels} value timestamp`.
    for bucket, value in (
        ('jobs_queue_wait_seconds_bucket{kind="echo",le="0.25"}', "0.2"),
        ('jobs_execution_seconds_bucket{kind="echo",le="0.025"}', "0.02"),
    ):
        (line,) = [line for line in lines if line.startswith(bucket + " ")]
        assert line.startswith(f"{bucket} 1.0 # {labels} {value} "), line
