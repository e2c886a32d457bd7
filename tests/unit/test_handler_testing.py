"""durable_jobs.testing.run_handler runs a handler as the worker would, whichever way its kind was declared."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import pytest

from durable_jobs import HandlerRegistry, JobContext, JobKinds, PermanentError
from durable_jobs.logs import JOB_LOG_LINES_PER_ATTEMPT_MAX
from durable_jobs.testing import MemoryLog, context_for, run_handler, run_handler_async

pytestmark = pytest.mark.timeout(30)

kinds = JobKinds()


@dataclass
class Resize:
    url: str
    width: int


@kinds.kind("image.resize", max_attempts=5, payload=Resize)
async def resize(ctx: JobContext, request: Resize) -> bytes:
    ctx.log.info("resizing %s to %d px", request.url, request.width)
    return f"{request.url}@{request.width}".encode()


@kinds.kind("text.upper")
def upper(ctx: JobContext) -> bytes:
    logging.getLogger("my_jobs.text").info("upper-casing %d bytes", len(ctx.payload))
    return ctx.payload.upper()


def count_words(ctx: JobContext) -> bytes:
    return str(len(ctx.payload.split())).encode()


def register(registry: HandlerRegistry) -> None:
    registry.register("text.count_words")(count_words)


def test_a_function_declared_with_a_payload_type_gets_its_payload_decoded() -> None:
    assert run_handler(resize, b'{"url": "https://x/a.png", "width": 64}') == b"https://x/a.png@64"
    assert run_handler(resize, {"url": "u", "width": 8}) == b"u@8"
    assert run_handler(resize, Resize("v", 9)) == b"v@9"
    with pytest.raises(PermanentError, match=r"payload\.width: must be int"):
        run_handler(resize, {"url": "u", "width": "wide"})


def test_a_job_kinds_or_a_registry_runs_the_kind_it_is_asked_for() -> None:
    assert run_handler(kinds, b"shout", kind="text.upper") == b"SHOUT"
    assert run_handler(kinds, {"url": "u", "width": 1}, kind="image.resize") == b"u@1"
    with pytest.raises(KeyError, match="image.resize, text.upper"):
        run_handler(kinds, b"")
    registry = HandlerRegistry()
    register(registry)
    assert run_handler(registry, b"a b c") == b"3"
    assert run_handler(count_words, "one two") == b"2"


def test_the_context_says_which_kind_and_attempt_it_is() -> None:
    seen: list[tuple[str, int, str]] = []

    @kinds.kind("probe.context")
    def probe(ctx: JobContext) -> bytes:
        seen.append((ctx.kind, ctx.attempt, ctx.tenant))
        return b""

    run_handler(probe, attempt=3, tenant="acme")
    assert seen == [("probe.context", 3, "acme")]


def test_ctx_log_and_logging_records_inside_the_handler_are_kept_with_the_attempt() -> None:
    ctx = context_for(b'{"url": "u", "width": 2}')
    run_handler(resize, ctx=ctx)
    assert isinstance(ctx.log_sink, MemoryLog)
    assert ctx.log_sink.messages == ["resizing u to 2 px"]
    ctx = context_for(b"abc")
    run_handler(upper, ctx=ctx)
    assert isinstance(ctx.log_sink, MemoryLog)
    assert [(line.logger, line.level, line.message) for line in ctx.log_sink.lines] == [
        ("my_jobs.text", "INFO", "upper-casing 3 bytes")
    ]
    logging.getLogger("my_jobs.text").warning("outside any handler")
    assert len(ctx.log_sink.lines) == 1


def test_an_attempt_keeps_a_bounded_number_of_lines() -> None:
    def chatty(ctx: JobContext) -> bytes:
        for i in range(JOB_LOG_LINES_PER_ATTEMPT_MAX + 5):
            ctx.log.debug("line %d", i)
        try:
            raise ValueError("boom")
        except ValueError:
            ctx.log.exception("failed")
        return b""

    ctx = context_for()
    run_handler(chatty, ctx=ctx)
    assert isinstance(ctx.log_sink, MemoryLog)
    assert len(ctx.log_sink.lines) == JOB_LOG_LINES_PER_ATTEMPT_MAX and ctx.log_sink.bound.dropped == 6
    closing = ctx.log_sink.bound.closing_line()
    assert closing is not None and closing.message.startswith("6 more lines were not kept")


def test_a_traceback_is_kept_on_the_line_of_ctx_log_exception() -> None:
    def failing(ctx: JobContext) -> bytes:
        try:
            json.loads("{")
        except ValueError:
            ctx.log.exception("bad input")
        return b""

    ctx = context_for()
    run_handler(failing, ctx=ctx)
    assert isinstance(ctx.log_sink, MemoryLog)
    (line,) = ctx.log_sink.lines
    assert line.level == "ERROR" and line.message.startswith("bad input\nTraceback")
    assert "JSONDecodeError" in line.message


async def test_run_handler_async_runs_a_coroutine_handler_on_the_running_loop() -> None:
    assert await run_handler_async(resize, {"url": "a", "width": 3}) == b"a@3"
