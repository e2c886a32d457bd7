"""Job kinds that misbehave on purpose, loaded by the end-to-end tests through JOBS_HANDLER_MODULES."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path

from shared.handlers import HandlerRegistry, JobContext, PushedBack, RetryableError

HANG_SECONDS = 6
TRACED_KIND = "traced"
# One kind per executor whose handler reports the span current in it and starts a span of its own.
SPAN_KINDS = {executor: f"span.{executor}" for executor in ("async", "thread", "process")}
HANDLER_SPAN = "handler work"
STALL_SECONDS_MAX = 60
FAN_IN_KIND = "fanin.merge"


def register(registry: HandlerRegistry) -> None:
    registry.register("poison.exit", max_attempts=3, backoff_base_seconds=0.1)(poison_exit)
    registry.register("poison.hang", max_attempts=2, backoff_base_seconds=0.1)(poison_hang)
    registry.register("charge", max_attempts=3, external_side_effects=True, backoff_base_seconds=0.1)(charge)
    registry.register("slow.external", timeout_seconds=0.5, external_side_effects=True)(slow)
    registry.register("slow.internal", timeout_seconds=0.5, max_attempts=2, backoff_base_seconds=0.1)(slow)
    registry.register("slow.after_intent", timeout_seconds=0.5, max_attempts=2, backoff_base_seconds=0.1)(
        slow_after_intent
    )
    registry.register("crash.once", backoff_base_seconds=0.1)(crash_once)
    registry.register("quick.flaky", max_attempts=3, backoff_base_seconds=0.1)(quick_flaky)
    registry.register(TRACED_KIND, max_attempts=3, backoff_base_seconds=0.1)(traced)
    for executor, kind in SPAN_KINDS.items():
        handler = span_report if executor == "async" else span_report_plain
        registry.register(kind, max_attempts=2, backoff_base_seconds=0.1, executor=executor)(handler)
    registry.register("stall.first", backoff_base_seconds=0.1)(stall_first)
    registry.register("plain.echo", max_attempts=2)(plain_echo)
    registry.register("pushed.twice", max_attempts=1)(pushed_back_twice)
    registry.register("charge.slow", max_attempts=3, external_side_effects=True)(charge_slowly)
    registry.register("plain.crash", max_attempts=2, backoff_base_seconds=0.1)(plain_crash)
    registry.register("crash.until_retried", max_attempts=2, backoff_base_seconds=0.1)(crash_until_retried)
    registry.register("cpu.thread", max_attempts=1)(busy_for)
    registry.register("cpu.process", max_attempts=1, executor="process")(busy_for)
    registry.register("process.crash", max_attempts=1, executor="process")(process_crash)
    registry.register("process.exit", max_attempts=1, executor="process")(process_exit)
    registry.register("wait.thread", max_attempts=1)(wait_for_stop)
    registry.register("stubborn.process", max_attempts=1, executor="process")(ignore_stop)
    for executor in ("async", "thread", "process"):
        handler = staged_document if executor == "async" else staged_document_plain
        registry.register(f"staged.{executor}", max_attempts=3, backoff_base_seconds=0.1, executor=executor)(handler)
    registry.register("progress.burst", max_attempts=1)(progress_burst)
    registry.register("gather", max_attempts=2, backoff_base_seconds=0.1)(gather)
    for executor in ("thread", "process"):
        registry.register(f"gather.{executor}", max_attempts=2, backoff_base_seconds=0.1, executor=executor)(
            gather_plain
        )
    registry.register("logs.async", max_attempts=2, backoff_base_seconds=0.1)(log_then_fail_once)
    for executor in ("thread", "process"):
        registry.register(f"logs.{executor}", max_attempts=2, backoff_base_seconds=0.1, executor=executor)(
            log_then_fail_once_plain
        )
    registry.register("logs.chatty", max_attempts=1)(log_past_the_bound)
    # Its policy comes from the environment, so two replicas can disagree on it.
    registry.register("variant", max_attempts=int(os.environ.get("JOBS_TEST_VARIANT_MAX_ATTEMPTS", "2")))(plain_echo)
    registry.register("sized.result", max_attempts=3)(sized_result)
    for executor in ("async", "thread", "process"):
        handler = fan_out if executor == "async" else fan_out_plain
        registry.register(f"fanout.{executor}", max_attempts=2, backoff_base_seconds=0.1, executor=executor)(handler)
    registry.register(FAN_IN_KIND, max_attempts=2, backoff_base_seconds=0.1)(fan_in)
    registry.register("spawn.unknown", max_attempts=3, backoff_base_seconds=0.1)(spawn_unknown_kind)
    registry.register("spawn.then_wait", max_attempts=3, backoff_base_seconds=0.1)(spawn_then_wait)


def _spawn_pages(ctx: JobContext) -> bytes:
    """Spawns one `plain.echo` child per page the payload names (JSON {"pages": n}) and, unless it says
    {"fan_in": false}, a fan-in that depends on them all; the result names them: {"pages": [ids],
    "fan_in": id or null}."""
    spec = json.loads(ctx.payload)
    pages = [ctx.spawn("plain.echo", f"page {i}".encode(), labels={"page": str(i)}) for i in range(spec["pages"])]
    merge = ctx.spawn(FAN_IN_KIND, b"", depends_on=pages) if spec.get("fan_in", True) else None
    return json.dumps({"pages": pages, "fan_in": merge}).encode()


async def fan_out(ctx: JobContext) -> bytes:
    await asyncio.sleep(0)
    return _spawn_pages(ctx)


def fan_out_plain(ctx: JobContext) -> bytes:
    """fan_out as a plain def, for a thread or a child process."""
    return _spawn_pages(ctx)


async def spawn_unknown_kind(ctx: JobContext) -> bytes:
    """Spawns a kind no worker published: the API refuses the completion and fails the attempt."""
    ctx.spawn("plain.echo", b"fine")
    ctx.spawn("no.such.kind", b"")
    return b"done"


async def spawn_then_wait(ctx: JobContext) -> bytes:
    """Spawns two children labelled with this attempt's fencing token, then waits the payload's seconds
    before it completes: long enough for a test to take its lease over."""
    for _ in range(2):
        ctx.spawn("plain.echo", b"child", labels={"token": str(ctx.fencing_token)})
    await asyncio.sleep(json.loads(ctx.payload)["seconds"])
    return b"done"


async def fan_in(ctx: JobContext) -> bytes:
    """The children's results, sorted and joined: it runs only once every one of them succeeded."""
    results = await ctx.dependency_results()
    return b"|".join(sorted(results.values()))


async def sized_result(ctx: JobContext) -> bytes:
    """A result of the size the payload names (JSON {"bytes": n, "fill": 0..255}), from a small payload."""
    spec = json.loads(ctx.payload)
    return bytes([spec["fill"]]) * spec["bytes"]


async def log_then_fail_once(ctx: JobContext) -> bytes:
    """Logs through ctx.log and through a module's logger; its first attempt then fails."""
    ctx.log.info("attempt %d of %s starting", ctx.attempt, ctx.kind)
    logging.getLogger("tests.user_code").warning("a record of the handler's own logger")
    await asyncio.sleep(0)
    if ctx.attempt == 1:
        raise RetryableError("first attempt fails")
    return b"logged"


def log_then_fail_once_plain(ctx: JobContext) -> bytes:
    """log_then_fail_once as a plain def, for a thread or a child process."""
    ctx.log.info("attempt %d of %s starting", ctx.attempt, ctx.kind)
    logging.getLogger("tests.user_code").warning("a record of the handler's own logger")
    if ctx.attempt == 1:
        raise RetryableError("first attempt fails")
    return b"logged"


def log_past_the_bound(ctx: JobContext) -> bytes:
    """Logs more lines than an attempt keeps."""
    for i in range(int(ctx.payload or b"1010")):
        ctx.log.debug("line %d", i)
    return b""


async def gather(ctx: JobContext) -> bytes:
    """A fan-in: the results of the jobs it depends on, as JSON by job id."""
    results = await ctx.dependency_results()
    return json.dumps({job_id: payload.decode() for job_id, payload in sorted(results.items())}).encode()


def gather_plain(ctx: JobContext) -> bytes:
    """gather as a plain def, for a thread or a child process."""
    results = ctx.dependency_results_blocking()
    return json.dumps({job_id: payload.decode() for job_id, payload in sorted(results.items())}).encode()


async def poison_exit(ctx: JobContext) -> bytes:
    """Kills its worker, as a segfaulting native library would."""
    os._exit(17)


async def poison_hang(ctx: JobContext) -> bytes:
    """Blocks the event loop, so its worker stops heartbeating and its lease runs out."""
    time.sleep(HANG_SECONDS)  # noqa: ASYNC251 - blocking the loop is the point
    return b"too late"


async def stall_first(ctx: JobContext) -> bytes:
    """Attempt 1 freezes its worker (the event loop blocks: no heartbeats, nothing else runs) until the
    file named by the payload exists, then returns; later attempts return at once."""
    if ctx.attempt == 1:
        release = Path(ctx.payload.decode())
        deadline = time.monotonic() + STALL_SECONDS_MAX
        while not release.exists() and time.monotonic() < deadline:  # noqa: ASYNC240 - as above
            time.sleep(0.05)  # noqa: ASYNC251 - blocking the loop is the point
    return b"attempt %d" % ctx.attempt


async def charge(ctx: JobContext) -> bytes:
    """Charges a card once. Attempt 1 dies after sending the charge; a later attempt reconciles from the
    receipts instead of charging again."""
    earlier = [r for r in await ctx.earlier_receipts() if r.step == "charge"]
    if earlier:
        await ctx.record_intent("charge", b"reconcile")
        await ctx.confirm("charge", b"found existing charge " + earlier[0].intent)
        return b"reconciled:" + earlier[0].intent
    await ctx.record_intent("charge", b"ch_" + ctx.job_id[-12:].encode())
    os._exit(18)


async def slow(ctx: JobContext) -> bytes:
    await asyncio.sleep(30)
    return b"never"


async def slow_after_intent(ctx: JobContext) -> bytes:
    """Sends an external call (intent recorded) whose answer never comes within the kind's timeout."""
    await ctx.record_intent("notify", b"request")
    await asyncio.sleep(30)
    return b"never"


async def crash_once(ctx: JobContext) -> bytes:
    """An unclassified exception: retryable by contract."""
    if ctx.attempt == 1:
        raise ValueError("unexpected input on first attempt")
    return b"ok on attempt %d" % ctx.attempt


async def quick_flaky(ctx: JobContext) -> bytes:
    spec = json.loads(ctx.payload or b"{}")
    if ctx.attempt <= spec.get("fail_times", 0):
        raise RetryableError(f"attempt {ctx.attempt} failed")
    return ctx.payload


async def traced(ctx: JobContext) -> bytes:
    """Fails its first `fail_times` attempts, then answers with the trace context it was handed."""
    spec = json.loads(ctx.payload or b"{}")
    if ctx.attempt <= spec.get("fail_times", 0):
        raise RetryableError(f"attempt {ctx.attempt} failed")
    return json.dumps({"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}).encode()


def span_report_plain(ctx: JobContext) -> bytes:
    """Reports, as JSON, the span current when it is called and the one it starts itself, as an
    instrumented library would; fails its first `fail_times` attempts after that."""
    # Imported here: a worker without OpenTelemetry loads this module too.
    from opentelemetry import trace

    current = trace.get_current_span().get_span_context()
    with trace.get_tracer("tests.handlers").start_as_current_span(HANDLER_SPAN) as own:
        started = own.get_span_context()
    if ctx.attempt <= json.loads(ctx.payload or b"{}").get("fail_times", 0):
        raise RetryableError(f"attempt {ctx.attempt} failed")
    report = {
        "current": [f"{current.trace_id:032x}", f"{current.span_id:016x}"],
        "started": [f"{started.trace_id:032x}", f"{started.span_id:016x}"],
        "traceparent": ctx.traceparent,
        "pid": os.getpid(),
    }
    return json.dumps(report).encode()


async def span_report(ctx: JobContext) -> bytes:
    return span_report_plain(ctx)


def plain_echo(ctx: JobContext) -> bytes:
    """A plain def: runs in the worker's thread pool."""
    return ctx.payload


def plain_crash(ctx: JobContext) -> bytes:
    raise KeyError(f"missing field on attempt {ctx.attempt}")


def crash_until_retried(ctx: JobContext) -> bytes:
    """Fails both attempts of its budget with an unclassified exception (so with a traceback) whose
    message carries markup, and succeeds on the first attempt after a manual retry."""
    if ctx.attempt <= 2:
        raise ValueError(f"<script>window.__xss = 1</script> ledger mismatch on attempt {ctx.attempt}")
    return b"reconciled on attempt %d" % ctx.attempt


def busy_for(ctx: JobContext) -> bytes:
    """Burns the CPU for the payload's seconds, as a parser or an image codec would, checking only
    for a stop request."""
    deadline = time.monotonic() + float(ctx.payload or b"1")
    spins = 0
    while time.monotonic() < deadline and not ctx.stop_requested.is_set():
        spins += sum(range(1000)) and 1
    return b"spun %d" % spins


def process_crash(ctx: JobContext) -> bytes:
    raise ZeroDivisionError("division by zero in the child")


def process_exit(ctx: JobContext) -> bytes:
    os._exit(9)


def wait_for_stop(ctx: JobContext) -> bytes:
    """Blocks its thread until the stop request arrives, then says so."""
    stopped = ctx.stop_requested.wait_blocking(60)
    return b"stopped" if stopped else b"not stopped"


def ignore_stop(ctx: JobContext) -> bytes:
    """Never looks at its stop request: only terminating its process ends it. Writes its pid to the
    file the payload names, so a test can watch the process go."""
    with open(ctx.payload.decode(), "w") as pid_file:
        pid_file.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


async def charge_slowly(ctx: JobContext) -> bytes:
    """Records its intent, then waits for the provider's answer far longer than a shutdown's grace."""
    await ctx.record_intent("charge", b"ch_slow")
    await asyncio.sleep(60)
    await ctx.confirm("charge", b"done")
    return b"charged"


PUSHBACK_KEY = "provider:test"


async def pushed_back_twice(ctx: JobContext) -> bytes:
    """Its provider refuses the first two claims (each claim raises the fencing token), then answers."""
    if ctx.fencing_token <= 2:
        raise PushedBack("429 from the provider", retry_after=0.2, key=PUSHBACK_KEY)
    return ctx.payload


def pushed_back_in_a_process(ctx: JobContext) -> bytes:
    """A process handler's pushback must reach the worker with its fields."""
    raise PushedBack("quota", retry_after=75, key="provider:process")


STAGES = ("upload_check", "extract_text", "embed", "publish_index")
PROGRESS_BURST = 1000


def _stage_output(workdir: Path, ctx: JobContext, stage: str) -> str:
    """Does a stage's work: counts the execution and writes its output durably before returning."""
    with (workdir / "executions").open("a") as log:
        log.write(f"{ctx.attempt} {stage}\n")
    output = workdir / f"{stage}.out"
    output.write_text(f"{stage} by attempt {ctx.attempt}")
    return str(output)


async def staged_document(ctx: JobContext) -> bytes:
    """The seed's document pipeline: each stage checkpoints once its output is written, attempt 1 fails
    after the second stage, and a later attempt skips what is checkpointed."""
    request = json.loads(ctx.payload)
    workdir = Path(request["dir"])
    for number, stage in enumerate(STAGES, start=1):
        if ctx.completed_stage(stage) is None:
            await ctx.checkpoint(stage, {"output": _stage_output(workdir, ctx, stage)})
        ctx.report_progress(number / len(STAGES), stage)
        if ctx.attempt == 1 and number == request["fail_after"]:
            raise RetryableError(f"attempt 1 stops after {stage}")
    return json.dumps({stage: ctx.checkpoints[stage].json()["output"] for stage in STAGES}).encode()


def staged_document_plain(ctx: JobContext) -> bytes:
    """staged_document as a plain def, for a thread or a child process."""
    request = json.loads(ctx.payload)
    workdir = Path(request["dir"])
    for number, stage in enumerate(STAGES, start=1):
        if ctx.completed_stage(stage) is None:
            ctx.checkpoint_blocking(stage, {"output": _stage_output(workdir, ctx, stage)})
        ctx.report_progress(number / len(STAGES), stage)
        if ctx.attempt == 1 and number == request["fail_after"]:
            raise RetryableError(f"attempt 1 stops after {stage}")
    return json.dumps({stage: ctx.checkpoints[stage].json()["output"] for stage in STAGES}).encode()


async def progress_burst(ctx: JobContext) -> bytes:
    """Reports progress PROGRESS_BURST times without yielding, then holds at 50% until the file named
    by the payload exists, then finishes at 100%."""
    for step in range(PROGRESS_BURST):
        ctx.report_progress(step / (2 * PROGRESS_BURST), f"burst {step}")
    ctx.report_progress(0.5, "waiting for the release file")
    release = Path(ctx.payload.decode())
    deadline = time.monotonic() + STALL_SECONDS_MAX
    # A file the test creates from outside the process: nothing to wait on but a poll.
    while not release.exists() and time.monotonic() < deadline:  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.05)
    ctx.report_progress(1.0, "done")
    return b"released"
