"""How users declare kinds: the registry's checks at start, module-level declarations and typed payloads.
No database: these are the handler API's own rules."""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass

import pytest

from shared.domain.kinds import Executor
from shared.handlers import HandlerRegistry, HandlerSpec, JobContext, JobKinds, PermanentError, decode_payload
from shared.handlers.loader import load_registry
from shared.handlers.testing import run_handler
from tests import handlers_declared


@dataclass
class Point:
    x: int
    y: float
    label: str | None = None


def _context(payload: bytes) -> JobContext:
    return JobContext("job-1", "acme", "kind", payload, 1, 3, 1)  # type: ignore[arg-type]


def _spec(registry: HandlerRegistry, kind: str) -> HandlerSpec:
    spec = registry.get(kind)
    assert spec is not None, f"{kind} is not registered"
    return spec


async def _async_handler(ctx: JobContext) -> bytes:
    return b""


def _plain_handler(ctx: JobContext) -> bytes:
    return b""


def test_the_executor_follows_the_handler_shape_unless_a_process_is_asked_for():
    registry = HandlerRegistry()
    registry.register("a")(_async_handler)
    registry.register("t")(_plain_handler)
    registry.register("p", executor="process")(_plain_handler)
    assert [_spec(registry, k).executor for k in ("a", "t", "p")] == [Executor.ASYNC, Executor.THREAD, Executor.PROCESS]
    assert _spec(registry, "p").policy.executor is Executor.PROCESS


@pytest.mark.parametrize(
    ("handler", "executor", "message"),
    [
        (_async_handler, "process", "needs a plain def"),
        (_plain_handler, "async", "needs an async def"),
        (lambda ctx: b"", "process", "module-level"),
    ],
)
def test_a_handler_that_cannot_run_where_asked_is_refused_at_registration(handler, executor, message):
    with pytest.raises(ValueError, match=message):
        HandlerRegistry().register("k", executor=executor)(handler)


def test_policies_of_equal_registrations_have_equal_digests_and_differ_otherwise():
    one, two, other = HandlerRegistry(), HandlerRegistry(), HandlerRegistry()
    one.register("k", max_attempts=4)(_plain_handler)
    two.register("k", max_attempts=4)(_plain_handler)
    other.register("k", max_attempts=5)(_plain_handler)
    assert _spec(one, "k").policy.digest() == _spec(two, "k").policy.digest() != _spec(other, "k").policy.digest()


def test_a_module_with_job_kinds_loads_like_one_with_register():
    registry = load_registry(["tests.handlers_declared", "tests.handlers_for_tests"])
    assert {"greet", "greet.process", "charge", "echo"} <= registry.kinds()
    assert _spec(registry, "greet").policy.max_attempts == 2
    assert _spec(registry, "greet").executor is Executor.ASYNC
    assert _spec(registry, "greet.process").executor is Executor.PROCESS
    call = _spec(registry, "greet").handler(_context(b'{"name": "ada", "times": 2}'))
    assert inspect.iscoroutine(call), "an async handler's call is a coroutine"
    result = asyncio.run(call)
    assert result == b"hello ada hello ada"


def test_a_module_without_either_is_refused():
    with pytest.raises(ValueError, match="no register"):
        load_registry(["tests.factories"])


def test_a_typed_payload_decodes_into_its_dataclass():
    assert decode_payload(b'{"x": 1, "y": 2}', Point) == Point(1, 2.0)
    assert decode_payload(json.dumps({"x": 1, "y": 0.5, "label": None}).encode(), Point).label is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"not json", "payload: not JSON"),
        (b"[1]", "payload: must be a JSON object"),
        (b'{"y": 1}', "payload.x: is required"),
        (b'{"x": "1", "y": 1}', "payload.x: must be int, not str"),
        (b'{"x": true, "y": 1}', "payload.x: must be int, not bool"),
        (b'{"x": 1, "y": 1, "z": 3}', "payload.z: is not a field of Point"),
    ],
)
def test_a_payload_that_does_not_fit_is_permanent_and_names_the_field(payload, message):
    with pytest.raises(PermanentError, match=message.replace(".", r"\.").replace("[", r"\[")):
        decode_payload(payload, Point)


def test_a_declared_payload_must_be_a_dataclass():
    with pytest.raises(TypeError, match="must be a dataclass"):
        JobKinds().kind("k", payload=dict)(_plain_handler)


def test_declared_kinds_keep_the_module_importable_for_process_children():
    assert handlers_declared.greet_in_a_process(_context(b""), handlers_declared.Greeting("x")) == (
        b"x from a child process"
    )


def test_run_handler_runs_any_shape_against_an_in_memory_context():
    registry = load_registry(["tests.handlers_declared", "tests.handlers_for_tests"])
    assert run_handler(registry, b'{"name": "ada"}', kind="greet") == b"hello ada"
    assert run_handler(registry, b"x", kind="plain.echo") == b"x"
    with pytest.raises(PermanentError, match="payload.name: is required"):
        run_handler(registry, b"{}", kind="greet")
    with pytest.raises(KeyError, match="missing field on attempt 2"):
        run_handler(registry, kind="plain.crash", attempt=2)


def test_a_fan_in_reads_the_dependency_results_it_is_given_in_either_shape():
    registry = load_registry(["tests.handlers_for_tests"])
    given = {"00000000-0000-4000-8000-00000000000a": b"text", "00000000-0000-4000-8000-00000000000b": b"image"}
    for kind in ("gather", "gather.thread"):
        gathered = json.loads(run_handler(registry, kind=kind, dependency_results=given))
        assert gathered == {
            "00000000-0000-4000-8000-00000000000a": "text",
            "00000000-0000-4000-8000-00000000000b": "image",
        }


def test_the_in_memory_context_keeps_receipts_like_the_real_one():
    async def pay(ctx: JobContext) -> bytes:
        await ctx.record_intent("charge", b"ch_1")
        await ctx.confirm("charge", b"ok")
        return b"%d" % len(await ctx.earlier_receipts())

    assert run_handler(pay) == b"1"
