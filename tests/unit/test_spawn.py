"""ctx.spawn: an id at once, from every handler shape (a coroutine, a thread, a child process); what it
refuses at once, and the bounds it shares with the API."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from api_service import convert as api_convert
from durable_jobs import SpawnRefused
from durable_jobs._proto.jobs.v1 import jobs_pb2
from durable_jobs.children import CHILDREN_BYTES_MAX, CHILDREN_PER_PARENT_MAX
from durable_jobs.jobs import Job
from durable_jobs.testing import context_for, run_handler
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import ChildJob, Completion, child_size
from shared.domain.trace_context import TraceContext
from shared.handlers import HandlerRegistry, JobContext
from tests import handlers_for_tests
from worker_service import convert
from worker_service.completion_batcher import BATCH_BYTES_MAX
from worker_service.handler_executors import HandlerExecutors
from worker_service.worker import spawned_children

pytestmark = pytest.mark.timeout(60)


def _context(kind: str, pages: int) -> JobContext:
    return JobContext(
        job_id=JobId("00000000-0000-7000-8000-000000000001"),
        tenant=TenantId("acme"),
        kind=kind,
        payload=json.dumps({"pages": pages}).encode(),
        attempt=1,
        max_attempts=2,
        fencing_token=FencingToken(1),
    )


@pytest.mark.parametrize("executor", ["async", "thread", "process"])
async def test_every_handler_shape_spawns_and_the_children_reach_the_completion(executor: str) -> None:
    registry = HandlerRegistry()
    handlers_for_tests.register(registry)
    spec = registry.get(f"fanout.{executor}")
    assert spec is not None
    executors = HandlerExecutors(threads=2, preload_modules=["tests.handlers_for_tests"])
    context = _context(spec.kind, pages=3)
    try:
        result = json.loads(await executors.run(spec, context))  # type: ignore[arg-type]
    finally:
        executors.close()

    assert [s.job_id for s in context.spawned] == [*result["pages"], result["fan_in"]]
    assert all(uuid.UUID(job_id).version == 7 for job_id in [*result["pages"], result["fan_in"]])
    assert [s.payload for s in context.spawned[:3]] == [b"page 0", b"page 1", b"page 2"]
    assert context.spawned[3].depends_on == tuple(result["pages"])
    children = tuple(ChildJob.of(s) for s in context.spawned)
    request = convert.complete_jobs_request([Completion(context.job_id, context.fencing_token, b"r", children)])
    sent = request.completions[0].children
    assert [c.job_id for c in sent] == [c.job_id for c in children]
    assert list(sent[3].request.depends_on) == result["pages"] and sent[0].request.labels == {"page": "0"}


def test_the_test_helper_shows_what_a_handler_spawned() -> None:
    ctx = context_for(b'{"pages": 2}')
    run_handler(handlers_for_tests.fan_out_plain, ctx=ctx)
    assert [s.kind for s in ctx.spawned] == ["plain.echo", "plain.echo", handlers_for_tests.FAN_IN_KIND]


def test_times_are_resolved_when_spawned_and_kept_absolute() -> None:
    ctx = context_for(b"")
    before = datetime.now(UTC)
    ctx.spawn("echo", b"x", run_after=timedelta(minutes=5), deadline=before + timedelta(hours=1), priority=7)
    (spawned,) = ctx.spawned
    assert spawned.run_after is not None and spawned.run_after >= before + timedelta(minutes=5)
    assert spawned.deadline == before + timedelta(hours=1) and spawned.priority == 7
    request = convert.complete_jobs_request([Completion(ctx.job_id, FencingToken(1), b"", (ChildJob.of(spawned),))])
    assert request.completions[0].children[0].request.run_after.ToDatetime(tzinfo=UTC) == spawned.run_after


@pytest.mark.parametrize("name", ["idempotency_key", "resource_key", "resource_version", "dedupe_by_input"])
def test_a_spawn_that_asks_for_more_than_a_new_job_is_refused_at_once(name: str) -> None:
    ctx = context_for(b"")
    with pytest.raises(ValueError, match=name):
        ctx.spawn("echo", b"x", **{name: "k"})
    assert ctx.spawned == []


def test_an_unknown_field_is_a_type_error_as_for_a_call() -> None:
    with pytest.raises(TypeError, match="colour"):
        context_for(b"").spawn("echo", b"x", colour="blue")


def test_spawns_are_bounded_per_parent_in_count_and_bytes() -> None:
    ctx = context_for(b"")
    for _ in range(CHILDREN_PER_PARENT_MAX):
        ctx.spawn("echo")
    with pytest.raises(SpawnRefused, match=str(CHILDREN_PER_PARENT_MAX)):
        ctx.spawn("echo")

    heavy = context_for(b"")
    heavy.spawn("echo", b"x" * (CHILDREN_BYTES_MAX // 2))
    with pytest.raises(SpawnRefused, match="bytes"):
        heavy.spawn("echo", b"x" * (CHILDREN_BYTES_MAX // 2))
    assert len(heavy.spawned) == 1


def test_a_largest_result_with_its_largest_children_fits_one_call() -> None:
    """2 MiB of result (the default maximum) and 1 MiB of children are within the batch's bound, so the
    batcher sends them, alone if need be, and the API's 4 MiB limit takes them; the worker and the API
    count a child's size alike."""
    assert 2 * 1024 * 1024 + CHILDREN_BYTES_MAX <= BATCH_BYTES_MAX
    ctx = context_for(b"")
    ctx.spawn("echo", b"p" * 1000, labels={"k": "v"}, depends_on=["00000000-0000-7000-8000-000000000002"])
    assert ctx.spawned[0].size == child_size(ChildJob.of(ctx.spawned[0]).job)


def test_the_sdks_job_names_its_parent() -> None:
    parent = "00000000-0000-7000-8000-000000000001"
    assert (
        Job.from_proto(jobs_pb2.Job(job_id="c", state=jobs_pb2.JOB_STATE_PENDING, parent_job_id=parent)).parent_job_id
        == parent
    )
    assert Job.from_proto(jobs_pb2.Job(job_id="s", state=jobs_pb2.JOB_STATE_PENDING)).parent_job_id is None


def test_children_travel_in_the_parents_trace() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    ctx = context_for(b"")
    ctx.traceparent, ctx.tracestate = traceparent, "vendor=1"
    ctx.spawn("echo", b"x")
    sent = convert.complete_jobs_request([Completion(ctx.job_id, FencingToken(1), b"", spawned_children(ctx))])
    (child,) = sent.completions[0].children
    assert (child.traceparent, child.tracestate) == (traceparent, "vendor=1")

    received = api_convert.completion_from_proto(sent.completions[0])
    assert received.children[0].job.trace_context == TraceContext(traceparent, "vendor=1")
    untraced = context_for(b"")
    untraced.spawn("echo")
    assert spawned_children(untraced)[0].job.trace_context is None
