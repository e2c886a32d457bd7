"""Runs a handler where its kind asks: on the event loop, in the bounded thread pool, or in a child
process. Heartbeats, claims and reports run on the loop, so only coroutine handlers share it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from durable_jobs.handlers import (
    HandlerError,
    HandlerSpec,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    PushedBack,
    RetryableError,
    StopSignal,
)
from durable_jobs.logs import LogLine, attempt_log_handler_installed, capturing, capturing_call
from shared.domain.checkpoints import Checkpoint
from shared.domain.errors import LeaseLost
from shared.domain.ids import JobId
from shared.domain.jobs import ErrorCategory
from shared.domain.kinds import Executor
from worker_service import tracing

# A process handler still running this long after its stop was requested is terminated.
PROCESS_STOP_GRACE_SECONDS_DEFAULT = 2.0
PROCESS_KILL_AFTER_SECONDS = 2.0
_ERRORS_BY_CATEGORY: dict[ErrorCategory, type[HandlerError]] = {
    ErrorCategory.RETRYABLE: RetryableError,
    ErrorCategory.PERMANENT: PermanentError,
    ErrorCategory.OUTCOME_UNKNOWN: OutcomeUnknownError,
}


class HandlerProcessFailed(Exception):
    """An unclassified exception raised in a handler's child process, or the child's death."""

    def __init__(self, type_name: str, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.traceback_text = traceback_text


class HandlerExecutors:
    def __init__(
        self,
        *,
        threads: int,
        preload_modules: Sequence[str] = (),
        stop_grace_seconds: float = PROCESS_STOP_GRACE_SECONDS_DEFAULT,
    ) -> None:
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="jobs-handler")
        # forkserver: children fork from a clean server process (never from this threaded, event-looped
        # one) with the handler modules already imported, so a child starts in milliseconds.
        self._processes = multiprocessing.get_context("forkserver")
        self._processes.set_forkserver_preload(["shared.handlers", __name__, *preload_modules])
        self._stop_grace = stop_grace_seconds

    async def run(self, spec: HandlerSpec, context: JobContext) -> object:
        if spec.executor is Executor.ASYNC:
            with capturing(context.log_sink):
                return await spec.handler(context)  # type: ignore[misc]
        if spec.executor is Executor.THREAD:
            # In a copy of the caller's context variables, as asyncio.to_thread does (run_in_executor
            # does not): the attempt's span stays the current one, and the handler's own spans nest in it;
            # with the attempt's log sink current, so that its logging records are kept with it.
            call = capturing_call(context.log_sink, spec.handler, context)
            return await asyncio.get_running_loop().run_in_executor(self._threads, call)
        return await self._run_in_process(spec, context)

    def close(self) -> None:
        """Threads still running a handler that ignored its stop keep running until they return."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _run_in_process(self, spec: HandlerSpec, context: JobContext) -> object:
        receiver, sender = self._processes.Pipe(duplex=False)
        # The child's checkpoints and progress, served by the parent's context while the child runs.
        calls, child_calls = self._processes.Pipe(duplex=True)
        stop = self._processes.Event()
        child = self._processes.Process(
            target=_child_main,
            args=(
                sender,
                spec.handler,
                _ChildContext.of(context),
                stop,
                child_calls,
                tracing.current_carrier(),
                logging.getLogger().level,
            ),
            name=f"jobs-handler-{context.kind}",
            daemon=True,
        )
        child.start()
        sender.close()
        child_calls.close()
        served = _ChildCalls(calls, context)
        serving = asyncio.create_task(served.serve(), name=f"child-calls-{context.job_id}")
        try:
            message = await _receive(receiver, child)
            # What the child sent before its result (its last progress) is served before the attempt ends.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(serving), PROCESS_KILL_AFTER_SECONDS)
        except asyncio.CancelledError:
            stop.set()
            await self._reap(child)
            raise
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            receiver.close()
            calls.close()
        await asyncio.get_running_loop().run_in_executor(None, child.join, PROCESS_KILL_AFTER_SECONDS)
        if served.lease_lost is not None:
            raise served.lease_lost
        if message[0] == "ok":
            # The jobs the child's handler spawned go with the completion, as a thread's would.
            context.spawned.extend(message[2])
        return _unpack(message)

    async def _reap(self, child: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, child.join, self._stop_grace)
        if child.exitcode is None:
            child.terminate()
            await loop.run_in_executor(None, child.join, PROCESS_KILL_AFTER_SECONDS)
        if child.exitcode is None:
            child.kill()
            await loop.run_in_executor(None, child.join, PROCESS_KILL_AFTER_SECONDS)


class _ChildCalls:
    """Serves a process handler's `checkpoint_blocking` and `report_progress` with the parent's context."""

    def __init__(self, connection: multiprocessing.connection.Connection, context: JobContext) -> None:
        self._connection = connection
        self._context = context
        # A refusal by the fence: the attempt ends as a lost lease, whatever the child does with it.
        self.lease_lost: LeaseLost | None = None

    async def serve(self) -> None:
        while True:
            message = await _next_message(self._connection)
            if message is None:
                return
            if message[0] == "progress":
                self._context.report_progress(message[1], message[2])
            elif message[0] == "log":
                if self._context.log_sink is not None:
                    self._context.log_sink.write(message[1])
            elif message[0] == "dependencies":
                self._connection.send(await self._dependencies())
            else:
                self._connection.send(await self._checkpoint(message[1], message[2]))

    async def _checkpoint(self, stage: str, data: bytes) -> tuple[Any, ...]:
        try:
            return ("ok", await self._context.checkpoint(stage, data))
        except LeaseLost as exc:
            self.lease_lost = exc
            return ("lease_lost", exc.message)
        except HandlerError as exc:
            return ("classified", exc.category.value, str(exc))

    async def _dependencies(self) -> tuple[Any, ...]:
        try:
            return ("ok", await self._context.dependency_results())
        except LeaseLost as exc:
            self.lease_lost = exc
            return ("lease_lost", exc.message)
        except HandlerError as exc:
            return ("classified", exc.category.value, str(exc))


async def _next_message(connection: multiprocessing.connection.Connection) -> tuple[Any, ...] | None:
    """The next message on a pipe without blocking the loop; None once the other end is closed."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(connection.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(connection.fileno())
    try:
        message: tuple[Any, ...] = connection.recv()
        return message
    except EOFError:
        return None


class _ParentCalls:
    """The child's side of _ChildCalls: its context's checkpoint book, progress sink, log sink and
    dependency results."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._lock = threading.Lock()

    def report(self, fraction: float, message: str) -> None:
        with self._lock:
            self._connection.send(("progress", fraction, message))

    def write(self, line: LogLine) -> None:
        with self._lock:
            self._connection.send(("log", line))

    async def record(self, stage: str, data: bytes) -> Checkpoint:
        return await asyncio.get_running_loop().run_in_executor(None, self.record_blocking, stage, data)

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        stored: Checkpoint = self._ask(("checkpoint", stage, data))
        return stored

    async def read(self) -> dict[JobId, bytes]:
        return await asyncio.get_running_loop().run_in_executor(None, self.read_blocking)

    def read_blocking(self) -> dict[JobId, bytes]:
        found: dict[JobId, bytes] = self._ask(("dependencies",))
        return found

    def _ask(self, request: tuple[Any, ...]) -> Any:
        """The parent's answer to one request, or the error it stands for."""
        with self._lock:
            self._connection.send(request)
            answer = self._connection.recv()
        if answer[0] == "ok":
            return answer[1]
        if answer[0] == "lease_lost":
            raise LeaseLost(answer[1])
        raise _ERRORS_BY_CATEGORY[ErrorCategory(answer[1])](answer[2])


async def _receive(receiver: multiprocessing.connection.Connection, child: Any) -> tuple[Any, ...]:
    """The child's one message; its death without one is an unclassified failure."""
    message = await _next_message(receiver)  # the child sends only tuples (_child_main)
    if message is not None:
        return message
    await asyncio.get_running_loop().run_in_executor(None, child.join, PROCESS_KILL_AFTER_SECONDS)
    return ("crashed", "HandlerProcessExited", f"the handler's process exited with code {child.exitcode}", "")


def _unpack(message: tuple[Any, ...]) -> object:
    status = message[0]
    if status == "ok":
        return message[1]
    if status == "classified":
        _, category, text = message
        raise _ERRORS_BY_CATEGORY[ErrorCategory(category)](text)
    if status == "hinted":
        # A retry hint or pushback is rebuilt from its own fields (its class pickles them).
        raise message[1]
    _, type_name, text, traceback_text = message
    raise HandlerProcessFailed(type_name, text, traceback_text)


@dataclass(frozen=True)
class _ChildContext:
    """What a process handler's context carries across the process boundary (no receipt book)."""

    fields: dict[str, Any]

    @classmethod
    def of(cls, context: JobContext) -> _ChildContext:
        names = (
            "job_id",
            "tenant",
            "kind",
            "payload",
            "attempt",
            "max_attempts",
            "fencing_token",
            "checkpoints",
            "traceparent",
            "tracestate",
        )
        return cls({name: getattr(context, name) for name in names})


class _ProcessStopSignal(StopSignal):
    """The child's view of the stop request: set by the parent through a process-shared event."""

    def __init__(self, event: ProcessEvent) -> None:
        self._event = event

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> bool:
        # A process handler is a plain def; an event loop it runs of its own may still wait for the stop.
        return await asyncio.get_running_loop().run_in_executor(None, self._event.wait)

    def wait_blocking(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


def _child_main(
    sender: Any,
    handler: Any,
    child_context: _ChildContext,
    stop: ProcessEvent,
    calls: Any,
    trace_carrier: dict[str, str],
    log_level: int,
) -> None:
    parent = _ParentCalls(calls)
    context = JobContext(
        **child_context.fields,
        stop_requested=_ProcessStopSignal(stop),
        checkpoint_book=parent,
        progress_sink=parent,
        dependency_source=parent,
        log_sink=parent,
    )
    try:
        with tracing.carried_context(trace_carrier), attempt_log_handler_installed(log_level), capturing(parent):
            result = handler(context)
        sender.send(("ok", result, context.spawned))
    except (PushedBack, RetryableError) as exc:
        sender.send(("hinted", _hinted_copy(exc)))
    except HandlerError as exc:
        sender.send(("classified", exc.category.value, str(exc) or type(exc).__name__))
    except BaseException as exc:  # noqa: BLE001 - everything the handler raised goes back to the worker
        # From the handler's frame on: this function's own frame says nothing about the failure.
        trace = "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        )
        sender.send(("crashed", type(exc).__name__, str(exc), trace))
    finally:
        sender.close()
        calls.close()
        tracing.flush_spans()


def _hinted_copy(exc: PushedBack | RetryableError) -> PushedBack | RetryableError:
    """The exception as its own class rebuilds it: a user's subclass may not pickle, its fields do."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, PushedBack):
        if exc.until is not None:
            return PushedBack(message, until=exc.until, key=exc.key)
        return PushedBack(message, retry_after=exc.retry_after_seconds, key=exc.key)
    return RetryableError(message, retry_after=exc.retry_after_seconds)
