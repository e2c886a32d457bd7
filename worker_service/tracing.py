"""Each attempt as an OpenTelemetry span, when opentelemetry-api is installed (the `tracing` extra).

Following the messaging semantic conventions for a consumer's "process" span: kind CONSUMER, named
`process <kind>`. The first attempt is a child of the submitter's span (the `traceparent` stored with
the job), so the trace shows the work the call caused. A later attempt starts a trace of its own and
links to the submitter's span: a retry is not part of the call that submitted the job, and hours of
backoff inside one trace would distort it. Without the package every method here does nothing.

Spans go to the global tracer provider unless one is passed: configure it as OpenTelemetry's
documentation says (`opentelemetry-instrument python -m worker_service`, or in a handler module).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any, TypeVar

from shared.domain.jobs import ClaimedJob, JobError
from shared.domain.trace_context import TRACEPARENT_HEADER, TRACESTATE_HEADER, TraceContext
from shared.process_metrics import installed_version

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the tracing extra is not installed: attempts run untraced
    trace = None  # type: ignore[assignment]

T = TypeVar("T")
TRACING_AVAILABLE = trace is not None
TRACER_NAME = "worker_service"
# Not one of the conventions' well-known systems; the conventions ask for a custom value then.
MESSAGING_SYSTEM = "durable_jobs"
OPERATION = "process"
# How soon a tracer provider configured after start is used, when none was at first.
PROVIDER_RECHECK_SECONDS = 1.0
# How long a handler's child process waits, after its result is sent, for its spans to be exported:
# the attempt's report waits for the child to exit.
CHILD_SPAN_FLUSH_SECONDS = 1.0


class AttemptSpan:
    """What the worker tells the span of one attempt; without OpenTelemetry, nothing happens."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def record(self, invocation: Awaitable[T]) -> Awaitable[T]:
        """The handler's awaitable, recording an exception it raises (with its stack) as a span event;
        as it is when there is no span to record on (most attempts: one coroutine less each)."""
        if self._span is None:
            return invocation
        return self._recorded(invocation)

    async def _recorded(self, invocation: Awaitable[T]) -> T:
        try:
            return await invocation
        except Exception as exc:
            self._span.record_exception(exc)
            raise

    def failed(self, error: JobError) -> None:
        if self._span is not None:
            self._span.set_attribute("error.type", error.category.value)
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, error.message[:200]))

    def stopped(self, reason: str) -> None:
        """The attempt ended without a result of its own: cancelled, superseded, lease lost, shutdown."""
        if self._span is not None:
            self._span.set_attribute("jobs.stop_reason", reason)

    def exemplar(self) -> dict[str, str] | None:
        """The span's trace as a Prometheus exemplar's labels, when this process records the span and its
        trace is sampled; else None. Any other span reaches no backend from here, so a link to it would
        lead nowhere (or, without a tracer provider, to the submitter's span instead of the attempt's)."""
        if self._span is None or not self._span.is_recording():
            return None
        context = self._span.get_span_context()
        if not (context.is_valid and context.trace_flags.sampled):
            return None
        return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


NO_SPAN = AttemptSpan()
# Made once: an untraced attempt (most of them) needs no context manager of its own.
_UNTRACED = contextlib.nullcontext(NO_SPAN)


class AttemptTracer:
    def __init__(self, tracer_provider: Any = None) -> None:
        self._tracer = (
            trace.get_tracer(TRACER_NAME, installed_version(), tracer_provider=tracer_provider)
            if TRACING_AVAILABLE
            else None
        )
        self._global_provider = tracer_provider is None
        self._recheck_at = 0.0
        self._unconfigured = False

    def attempt(self, job: ClaimedJob) -> contextlib.AbstractContextManager[AttemptSpan]:
        """The attempt's span, current for the code run inside (the handler's own spans nest in it)."""
        if self._tracer is None or (job.trace_context is None and self._untraced()):
            return _UNTRACED
        return self._traced(self._tracer, job)

    @contextlib.contextmanager
    def _traced(self, tracer: Any, job: ClaimedJob) -> Iterator[AttemptSpan]:
        submitter = _span_context(job.trace_context)
        # Always from an empty context: whatever span is current in the claim loop is not the parent.
        parent = otel_context.Context()
        links = []
        if submitter is not None and job.attempt <= 1:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(submitter), parent)
        elif submitter is not None:
            links.append(trace.Link(submitter, {"jobs.link": "submitted_by"}))
        with tracer.start_as_current_span(
            f"{OPERATION} {job.kind}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes=_attributes(job),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield AttemptSpan(span)

    def _untraced(self) -> bool:
        """No tracer provider configured (yet: a handler module may set one): the span would be
        OpenTelemetry's no-op one, and with no submitter's context there is none to make current either.
        Looked up at most once a second, since the lookup reads the environment each time; the no-op
        span took about a sixth of an echo job's worker time."""
        if not self._global_provider:
            return False
        now = time.monotonic()
        if now >= self._recheck_at:
            self._recheck_at = now + PROVIDER_RECHECK_SECONDS
            self._unconfigured = isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        return self._unconfigured


def _span_context(trace_context: TraceContext | None) -> Any:
    """The submitter's span as a remote span context, or None."""
    if trace_context is None:
        return None
    carrier = {TRACEPARENT_HEADER: trace_context.traceparent}
    if trace_context.tracestate:
        carrier[TRACESTATE_HEADER] = trace_context.tracestate
    extracted = TraceContextTextMapPropagator().extract(carrier)
    span_context = trace.get_current_span(extracted).get_span_context()
    return span_context if span_context.is_valid else None


def _attributes(job: ClaimedJob) -> dict[str, str | int]:
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": OPERATION,
        "messaging.operation.name": OPERATION,
        "messaging.destination.name": job.kind,
        "messaging.message.id": job.job_id,
        "jobs.job_id": job.job_id,
        "jobs.kind": job.kind,
        "jobs.attempt": job.attempt,
        "jobs.max_attempts": job.max_attempts,
        "jobs.tenant": job.tenant,
        "jobs.fencing_token": job.fencing_token,
    }


def current_carrier() -> dict[str, str]:
    """The current trace context as propagation headers, for a handler's child process; empty without
    OpenTelemetry or outside a span."""
    carrier: dict[str, str] = {}
    if TRACING_AVAILABLE:
        propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def carried_context(carrier: Mapping[str, str]) -> Iterator[None]:
    """Makes the context that `current_carrier` wrote the current one, in a handler's child process, so
    the spans its libraries start there are children of the attempt's span."""
    if not (TRACING_AVAILABLE and carrier):
        yield
        return
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def flush_spans(timeout_seconds: float = CHILD_SPAN_FLUSH_SECONDS) -> None:
    """Exports the spans this process still buffers. A handler's child process ends with os._exit
    (multiprocessing's way), which skips the exit hooks that would otherwise flush them."""
    if not TRACING_AVAILABLE:
        return
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(int(timeout_seconds * 1000))
