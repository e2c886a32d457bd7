"""Spans of a worker run under opentelemetry-instrument, as docs/METRICS.md tells operators to, exported
over OTLP/HTTP to a real receiver: the span a handler of every shape (async, thread, process) starts is
a child of its attempt's span, and the exemplars of the latency histograms name attempts the receiver
got, on the worker's OpenMetrics scrape and through Prometheus's exemplar storage."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jobs.v1 import jobs_pb2
from tests import handlers_for_tests
from tests.dashboard_queries import load_dashboard, panel_queries, substitute
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.process_fixtures import ServiceProcess, ServiceStack
from tests.process_fixtures import wait_until as wait_until_sync

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


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
        # Leases are not what this test checks: the stack's 2 s lease expired under a load of 10.
        "JOBS_LEASE_SECONDS": "10",
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

        def succeeded(job: jobs_pb2.Job = job) -> bool:
            return client.get(job.job_id).state == jobs_pb2.JOB_STATE_SUCCEEDED

        wait_until_sync(succeeded, timeout=30, what=f"{job.kind} to succeed")

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
