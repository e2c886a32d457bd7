"""What a job handler sees and how it says that an attempt failed.

A handler is `async def handle(ctx: JobContext) -> bytes` or a plain `def handle(ctx) -> bytes`.
Returning stores the result; raising one of the HandlerError types fails the attempt with that
category; any other exception counts as retryable. A coroutine handler runs on the worker's event loop
and must never block it; a plain one runs in the worker's thread pool, or in a child process when its
kind asks for `executor="process"` (CPU-bound code). Cancellation (a cancel request, a superseding
version, a lost lease or shutdown) arrives as asyncio.CancelledError at a coroutine handler's next
await; plain handlers poll `ctx.stop_requested.is_set()` (or block on `ctx.stop_requested.wait_blocking`),
and a process handler still running after the stop grace is terminated. docs/HANDLERS.md has the rest.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from durable_jobs.children import (
    CHILDREN_BYTES_MAX,
    CHILDREN_PER_PARENT_MAX,
    SpawnedJob,
    new_job_ids,
    spawned_job,
)
from durable_jobs.ids import FencingToken, JobId, TenantId
from durable_jobs.kinds import (
    BACKOFF_BASE_SECONDS_DEFAULT,
    BACKOFF_CAP_SECONDS_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    Executor,
    KindPolicy,
    declared_key_problem,
)
from durable_jobs.logs import JobLogger, LogSink
from durable_jobs.records import (
    Checkpoint,
    ErrorCategory,
    Receipt,
    clean_progress_message,
    data_problem,
    encode_checkpoint_data,
    fraction_problem,
    stage_problem,
)

# The retry backoff (full jitter in [0, min(cap, base * 2^(attempt-1))] seconds) is computed by the
# service's database from the policy a worker publishes.
# Longer than any wait a retry is worth, and far inside the range of the database's timestamps, which a
# retry time must fit.
BACKOFF_CAP_SECONDS_MAX = 30 * 24 * 3600.0


class HandlerError(Exception):
    """Base of the failures a handler raises on purpose."""

    category: ErrorCategory = ErrorCategory.RETRYABLE


class RetryableError(HandlerError):
    """Transient: try again after a backoff, or after `retry_after` (seconds or a timedelta) when given,
    in place of the backoff. The wait is cut to 7 days; a retry that could not start before the job's
    deadline fails the job."""

    category = ErrorCategory.RETRYABLE

    def __init__(self, message: str = "", *, retry_after: float | timedelta | None = None) -> None:
        super().__init__(message)
        self.retry_after_seconds = None if retry_after is None else _seconds(retry_after, "retry_after")

    def __reduce__(self) -> tuple[object, ...]:
        # Crosses from a process handler's child; the keyword argument must survive the trip.
        return (_rebuild_retryable, (str(self), self.retry_after_seconds))


class PushedBack(HandlerError):
    """The provider pushed back (HTTP 429 with Retry-After, a quota until T): the attempt ends without
    counting against max_attempts and the job waits, PENDING, for `retry_after` (seconds or a timedelta)
    or until `until` (an aware datetime). `key` names the limit the provider applies, e.g.
    "provider:openai"; it is recorded in the job's history. Bounded: the job's deadline applies, an
    attempt that recorded a receipt counts, and after 100 pushbacks of one job each further one counts."""

    category = ErrorCategory.RETRYABLE

    def __init__(
        self,
        message: str = "",
        *,
        retry_after: float | timedelta | None = None,
        until: datetime | None = None,
        key: str | None = None,
    ) -> None:
        if (retry_after is None) == (until is None):
            raise ValueError("PushedBack needs exactly one of retry_after and until")
        if until is not None and until.tzinfo is None:
            raise ValueError("PushedBack(until=...) needs an aware datetime")
        super().__init__(message)
        self.retry_after_seconds = None if retry_after is None else _seconds(retry_after, "retry_after")
        self.until = until
        self.key = key

    def wait_seconds(self, now: datetime | None = None) -> float:
        """How long the job should wait from `now` (default: this host's clock)."""
        if self.until is None:
            return self.retry_after_seconds or 0.0
        return max((self.until - (now or datetime.now(UTC))).total_seconds(), 0.0)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_pushed_back, (str(self), self.retry_after_seconds, self.until, self.key))


def _seconds(value: float | timedelta, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds >= 0 or math.isinf(seconds):
        raise ValueError(f"{name} must be a finite, non-negative wait; got {value!r}")
    return seconds


def _rebuild_retryable(message: str, retry_after: float | None) -> RetryableError:
    return RetryableError(message, retry_after=retry_after)


def _rebuild_pushed_back(
    message: str, retry_after: float | None, until: datetime | None, key: str | None
) -> PushedBack:
    return PushedBack(message, retry_after=retry_after, until=until, key=key)


class PermanentError(HandlerError):
    """Will fail the same way every time: stop now."""

    category = ErrorCategory.PERMANENT


class OutcomeUnknownError(HandlerError):
    """An external effect may have happened (a call timed out after it was sent): needs a decision."""

    category = ErrorCategory.OUTCOME_UNKNOWN


class CheckpointRefused(PermanentError):
    """A checkpoint out of bounds (its stage name, its size, the number of stages): the same every
    attempt, so the attempt fails PERMANENT unless the handler catches it."""


class SpawnRefused(PermanentError):
    """A spawn over the bounds (CHILDREN_PER_PARENT_MAX jobs, CHILDREN_BYTES_MAX bytes per parent): the
    same every attempt, so the attempt fails PERMANENT unless the handler catches it."""


class StopSignal:
    """Set when the attempt should stop early. Coroutine handlers `await wait()`; plain handlers in a
    thread poll `is_set()` or call `wait_blocking(timeout)`. Set only from the worker's event loop."""

    def __init__(self) -> None:
        self._stopped = False
        # Each event is made by the first wait of its kind only: most attempts never wait on either, and
        # a threading.Event (a Condition and its lock) per job was a twelfth of an echo job's worker time,
        # an asyncio.Event a thirtieth.
        self._loop_event: asyncio.Event | None = None
        self._thread_event: threading.Event | None = None

    def set(self) -> None:
        self._stopped = True
        with _THREAD_EVENT_LOCK:
            if self._thread_event is not None:
                self._thread_event.set()
        if self._loop_event is not None:
            self._loop_event.set()

    def is_set(self) -> bool:
        return self._stopped

    async def wait(self) -> bool:
        # set() and wait() both run on the worker's event loop, so nothing can slip between these lines.
        if self._loop_event is None:
            self._loop_event = asyncio.Event()
            if self._stopped:
                self._loop_event.set()
        return await self._loop_event.wait()

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """From a plain handler's thread: True once stop was requested, False after `timeout`."""
        with _THREAD_EVENT_LOCK:
            if self._thread_event is None:
                self._thread_event = threading.Event()
                if self._stopped:
                    self._thread_event.set()
        return self._thread_event.wait(timeout)


# One lock for every signal: taken only by a set() and a handler's first wait_blocking().
_THREAD_EVENT_LOCK = threading.Lock()
# Spawns are few, from any thread of any attempt: one lock for all, not one per context made per job.
_SPAWN_LOCK = threading.Lock()


class ReceiptBook(Protocol):
    """Where a context keeps receipts; each write is fenced by the attempt's lease."""

    async def record_intent(self, step: str, intent: bytes) -> None: ...

    async def confirm(self, step: str, receipt: bytes) -> None: ...

    async def list(self) -> list[Receipt]: ...


class CheckpointBook(Protocol):
    """Where a context records finished stages; each write is fenced by the attempt's lease (a stale one
    raises LeaseLost and the attempt stops)."""

    async def record(self, stage: str, data: bytes) -> Checkpoint: ...

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        """The same from a plain handler's thread (or process), waiting for the answer."""
        ...


class ProgressSink(Protocol):
    """Where a context's progress goes: takes the latest value at once, from any thread, never blocking."""

    def report(self, fraction: float, message: str) -> None: ...


class DependencyResults(Protocol):
    """Where a context reads the results of the jobs its job depends on; each read is fenced by the lease."""

    async def read(self) -> dict[JobId, bytes]: ...

    def read_blocking(self) -> dict[JobId, bytes]:
        """The same from a plain handler's thread (or process), waiting for the answer."""
        ...


@dataclass
class JobContext:
    """What one attempt of a job sees: the job, the attempt, and the ways to record what it did."""

    job_id: JobId
    # The tenant that submitted the job (from its credential): to keep each tenant's data apart.
    tenant: TenantId
    # The kind the job was submitted with, as registered: one handler may serve several kinds.
    kind: str
    # The submission's payload, as bytes; a kind declared with `payload=` also gets it decoded.
    payload: bytes
    # 1 for the first attempt, rising with each retry; a pushback's next claim keeps the number.
    attempt: int
    # The most attempts the job gets (the submission's, else the kind's): attempt == max_attempts is
    # the last try.
    max_attempts: int
    # Rises with every claim; pass it to external systems so that they can fence stale writers too.
    fencing_token: FencingToken
    # Set when the job should stop early (cancel requested, superseded, lease lost, shutdown); a
    # coroutine handler's task is also cancelled.
    stop_requested: StopSignal = field(default_factory=StopSignal)
    receipt_book: ReceiptBook | None = None
    # The W3C trace context the job was submitted with (None: the submitter sent none), for handlers
    # that pass it on or log it themselves. With OpenTelemetry installed the attempt's span is the
    # current span while the handler runs, so instrumented libraries nest under it on their own.
    traceparent: str | None = None
    tracestate: str | None = None
    # The stages finished so far, by name: earlier attempts' (read at claim) and this one's.
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    checkpoint_book: CheckpointBook | None = None
    progress_sink: ProgressSink | None = None
    dependency_source: DependencyResults | None = None
    # Where `log` lines go; None keeps them in the process's own log only.
    log_sink: LogSink | None = None
    # The jobs this attempt spawned, in order; sent with its completion and created only with it.
    spawned: list[SpawnedJob] = field(default_factory=list)
    _unconfirmed: set[str] = field(default_factory=set)
    _spawned_bytes: int = field(default=0, repr=False, compare=False)

    @property
    def log(self) -> JobLogger:
        """The attempt's logger (`ctx.log.info("%d rows", n)`): every line is kept with the job, bounded
        per attempt, and readable with ListJobLogs, `jobsctl logs` and the console; it also reaches the
        worker's own log. Records of the standard `logging` made inside the handler are kept too."""
        return JobLogger(self.log_sink, {"job_id": self.job_id, "kind": self.kind, "attempt": self.attempt})

    def spawn(self, kind: str, payload: object = b"", **fields: object) -> JobId:
        """Spawns a child job and returns its id at once. The child is created only if this attempt's
        completion is accepted, in the same transaction, in this job's tenant: an attempt that fails, is
        cancelled or loses its lease creates none of its children. `fields` are SubmitJob's (priority,
        run_after, max_attempts, deadline, depends_on, labels, limit_keys); `depends_on` may name
        children spawned before (a fan-in: `ctx.spawn("merge", b"", depends_on=ids)` runs once they all
        succeeded and reads their results with `dependency_results`). At most CHILDREN_PER_PARENT_MAX
        (1000) per job and CHILDREN_BYTES_MAX (1 MiB) together: past them, SpawnRefused. Callable from
        every handler shape (a coroutine, a thread, a process): it only records."""
        (job_id,) = new_job_ids(1)
        child = spawned_job(JobId(str(job_id)), kind, payload, fields)
        with _SPAWN_LOCK:
            if len(self.spawned) >= CHILDREN_PER_PARENT_MAX:
                raise SpawnRefused(f"a job may spawn at most {CHILDREN_PER_PARENT_MAX} jobs")
            if self._spawned_bytes + child.size > CHILDREN_BYTES_MAX:
                raise SpawnRefused(f"a job's spawned jobs may hold at most {CHILDREN_BYTES_MAX} bytes together")
            self.spawned.append(child)
            self._spawned_bytes += child.size
        return child.job_id

    def completed_stage(self, stage: str) -> Checkpoint | None:
        """The stage's checkpoint when an attempt (an earlier one, or this one) finished it, else None."""
        return self.checkpoints.get(stage)

    async def checkpoint(self, stage: str, data: object = b"") -> Checkpoint:
        """Records that `stage` is done. Call it only once the stage's output is durable (stored where
        the next attempt finds it): a later attempt skips the stage on the strength of this record.
        `data` is bytes, kept as they are, or any JSON value (read back with `Checkpoint.json()`); at
        most 16 KiB: a pointer to the output, never the output itself. From a plain handler, use
        `checkpoint_blocking`."""
        encoded = _checked_checkpoint(stage, data)
        stored = await self._checkpoint_book().record(stage, encoded)
        self.checkpoints[stage] = stored
        return stored

    def checkpoint_blocking(self, stage: str, data: object = b"") -> Checkpoint:
        """`checkpoint` for a plain `def` handler (a thread or a process): waits for the stored record."""
        encoded = _checked_checkpoint(stage, data)
        stored = self._checkpoint_book().record_blocking(stage, encoded)
        self.checkpoints[stage] = stored
        return stored

    def report_progress(self, fraction: float, message: str = "") -> None:
        """Says how far the attempt has got (0 to 1), for GetJob and WatchJob. Returns at once from any
        handler shape; the worker sends at most one value per job per JOBS_PROGRESS_INTERVAL_SECONDS,
        the latest winning, and the last one before the attempt ends. The message is cut to 200
        characters. A context with nowhere to send progress drops it."""
        problem = fraction_problem(fraction)
        if problem is not None:
            raise ValueError(problem)
        if self.progress_sink is not None:
            self.progress_sink.report(float(fraction), clean_progress_message(message))

    def _checkpoint_book(self) -> CheckpointBook:
        if self.checkpoint_book is None:
            raise RuntimeError("this context has no checkpoint book")
        return self.checkpoint_book

    async def dependency_results(self) -> dict[JobId, bytes]:
        """The stored results of the jobs this one depends on (depends_on; a delivery set's members for its
        fan-in), by job id. Read through the API for this attempt's lease only: a replaced attempt gets
        LeaseLost. A dependency whose resource was deleted since has no result and is absent."""
        return await self._dependencies().read()

    def dependency_results_blocking(self) -> dict[JobId, bytes]:
        """`dependency_results` for a plain `def` handler (a thread or a process)."""
        return self._dependencies().read_blocking()

    def _dependencies(self) -> DependencyResults:
        if self.dependency_source is None:
            raise RuntimeError("this context has no dependency results")
        return self.dependency_source

    async def record_intent(self, step: str, intent: bytes = b"") -> None:
        """Call just before an external call with side effects. If this attempt's lease then expires
        before `confirm(step)`, the job goes to OUTCOME_UNKNOWN instead of being retried blindly."""
        await self._book().record_intent(step, intent)
        self._unconfirmed.add(step)

    async def confirm(self, step: str, receipt: bytes = b"") -> None:
        """Call once the external call is known to have taken effect (keep its id in `receipt`)."""
        if step not in self._unconfirmed:
            raise ValueError(f"confirm({step!r}) without record_intent({step!r}) in this attempt")
        await self._book().confirm(step, receipt)
        self._unconfirmed.discard(step)

    async def earlier_receipts(self) -> list[Receipt]:
        """Every receipt of this job, earlier attempts included, to reconcile before calling again."""
        return await self._book().list()

    @property
    def unconfirmed_steps(self) -> frozenset[str]:
        return frozenset(self._unconfirmed)

    def _book(self) -> ReceiptBook:
        if self.receipt_book is None:
            raise RuntimeError("this context has no receipt book")
        return self.receipt_book


def _checked_checkpoint(stage: str, data: object) -> bytes:
    encoded = encode_checkpoint_data(data)
    problem = stage_problem(stage) or data_problem(encoded)
    if problem is not None:
        raise CheckpointRefused(f"checkpoint {str(stage)[:64]!r}: {problem}")
    return encoded


Handler = Callable[[JobContext], Awaitable[bytes]] | Callable[[JobContext], bytes]


@dataclass(frozen=True)
class HandlerSpec:
    handler: Handler
    # What workers publish for this kind and the API applies to its submissions.
    policy: KindPolicy

    @property
    def kind(self) -> str:
        return self.policy.kind

    @property
    def executor(self) -> Executor:
        return self.policy.executor


class HandlerRegistry:
    """The job kinds a worker replica runs, with the policy it publishes for each."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}

    def register(
        self,
        kind: str,
        *,
        max_attempts: int = MAX_ATTEMPTS_DEFAULT,
        timeout_seconds: float | None = None,
        external_side_effects: bool = False,
        backoff_base_seconds: float = BACKOFF_BASE_SECONDS_DEFAULT,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS_DEFAULT,
        executor: Executor | str | None = None,
        limit_keys: tuple[str, ...] | list[str] = (),
    ) -> Callable[[Handler], Handler]:
        """Decorator registering `handler` for `kind`. The executor follows the handler's shape (a
        coroutine function runs on the loop, a plain function in a thread) unless `executor="process"`
        asks for a child process. Registering a kind twice, or a coroutine for a thread or a process,
        is a programming error, reported at start rather than at the first job."""
        if not 0 <= backoff_base_seconds < math.inf:
            raise ValueError(f"job kind {kind!r}: backoff_base_seconds must be a finite number of seconds >= 0")
        if not 0 <= backoff_cap_seconds <= BACKOFF_CAP_SECONDS_MAX:
            raise ValueError(
                f"job kind {kind!r}: backoff_cap_seconds must be between 0 and {BACKOFF_CAP_SECONDS_MAX:g}"
            )
        for key in limit_keys:
            problem = declared_key_problem(key)
            if problem is not None:
                raise ValueError(f"job kind {kind!r}: limit key {key!r}: {problem}")

        def decorate(handler: Handler) -> Handler:
            if kind in self._specs:
                raise ValueError(f"job kind {kind!r} is registered twice")
            chosen = _executor_for(kind, handler, executor)
            if max_attempts < 1:
                raise ValueError(f"job kind {kind!r}: max_attempts must be at least 1")
            self._specs[kind] = HandlerSpec(
                handler,
                KindPolicy(
                    kind,
                    max_attempts=max_attempts,
                    backoff_base_seconds=backoff_base_seconds,
                    backoff_cap_seconds=backoff_cap_seconds,
                    timeout_seconds=timeout_seconds,
                    external_side_effects=external_side_effects,
                    limit_keys=tuple(limit_keys),
                    executor=chosen,
                ),
            )
            return handler

        return decorate

    def get(self, kind: str) -> HandlerSpec | None:
        return self._specs.get(kind)

    def kinds(self) -> frozenset[str]:
        return frozenset(self._specs)

    def specs(self) -> list[HandlerSpec]:
        return [self._specs[kind] for kind in sorted(self._specs)]


def _executor_for(kind: str, handler: Handler, asked: Executor | str | None) -> Executor:
    # A callable object (a typed payload's wrapper) is a coroutine handler when its __call__ is one.
    is_coroutine = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
    if asked is None:
        return Executor.ASYNC if is_coroutine else Executor.THREAD
    chosen = Executor(asked)
    if is_coroutine and chosen is not Executor.ASYNC:
        raise ValueError(f"job kind {kind!r}: executor {chosen.value!r} needs a plain def handler, not async def")
    if not is_coroutine and chosen is Executor.ASYNC:
        raise ValueError(f"job kind {kind!r}: executor 'async' needs an async def handler")
    name = getattr(inspect.unwrap(handler), "__qualname__", "")
    if chosen is Executor.PROCESS and ("<locals>" in name or "<lambda>" in name):
        raise ValueError(f"job kind {kind!r}: a process handler must be a module-level function (it is pickled)")
    return chosen
