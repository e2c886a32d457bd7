"""What a job handler sees and how it says that an attempt failed.

A handler is `async def handle(ctx: JobContext) -> bytes`. Returning stores the result; raising one of
the HandlerError types fails the attempt with that category; any other exception counts as retryable.
Cancellation (a cancel request, a superseding version, a lost lease or shutdown) arrives as
asyncio.CancelledError at the handler's next await.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import ErrorCategory, Receipt

MAX_ATTEMPTS_DEFAULT = 3
# Retry backoff: full jitter in [0, min(cap, base * 2^(attempt-1))] seconds, computed by the database:
# jobs_retry_backoff, beside jobs_next_state_after_failure, in shared/storage/migrations/*_failure_policy.sql.
BACKOFF_BASE_SECONDS_DEFAULT = 1.0
BACKOFF_CAP_SECONDS_DEFAULT = 300.0
# Longer than any wait a retry is worth, and far inside the range of the database's timestamps, which a
# retry time must fit.
BACKOFF_CAP_SECONDS_MAX = 30 * 24 * 3600.0


class HandlerError(Exception):
    """Base of the failures a handler raises on purpose."""

    category: ErrorCategory = ErrorCategory.RETRYABLE


class RetryableError(HandlerError):
    """Transient: try again after a backoff."""

    category = ErrorCategory.RETRYABLE


class PermanentError(HandlerError):
    """Will fail the same way every time: stop now."""

    category = ErrorCategory.PERMANENT


class OutcomeUnknownError(HandlerError):
    """An external effect may have happened (a call timed out after it was sent): needs a decision."""

    category = ErrorCategory.OUTCOME_UNKNOWN


class ReceiptBook(Protocol):
    """Where a context keeps receipts; each write is fenced by the attempt's lease."""

    async def record_intent(self, step: str, intent: bytes) -> None: ...

    async def confirm(self, step: str, receipt: bytes) -> None: ...

    async def list(self) -> list[Receipt]: ...


@dataclass
class JobContext:
    job_id: JobId
    tenant: TenantId
    kind: str
    payload: bytes
    attempt: int
    max_attempts: int
    # Rises with every claim; pass it to external systems so that they can fence stale writers too.
    fencing_token: FencingToken
    # Set when the job should stop early (cancel requested, superseded); the task is also cancelled.
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    receipt_book: ReceiptBook | None = None
    # The W3C trace context the job was submitted with (None: the submitter sent none), for handlers
    # that pass it on or log it themselves. With OpenTelemetry installed the attempt's span is the
    # current span while the handler runs, so instrumented libraries nest under it on their own.
    traceparent: str | None = None
    tracestate: str | None = None
    _unconfirmed: set[str] = field(default_factory=set)

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


Handler = Callable[[JobContext], Awaitable[bytes]]


@dataclass(frozen=True)
class HandlerSpec:
    kind: str
    handler: Handler
    max_attempts: int = MAX_ATTEMPTS_DEFAULT
    # Longest one attempt may run; None means only the lease bounds it.
    timeout_seconds: float | None = None
    # True for kinds that call out to systems which may act on a request whose answer was lost.
    external_side_effects: bool = False
    backoff_base_seconds: float = BACKOFF_BASE_SECONDS_DEFAULT
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS_DEFAULT


class HandlerRegistry:
    """The job kinds a process knows. The API uses it to reject unknown kinds; workers to run them."""

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
    ) -> Callable[[Handler], Handler]:
        """Decorator registering `handler` for `kind`; a kind registered twice is a programming error."""
        if not 0 <= backoff_base_seconds < math.inf:
            raise ValueError(f"job kind {kind!r}: backoff_base_seconds must be a finite number of seconds >= 0")
        if not 0 <= backoff_cap_seconds <= BACKOFF_CAP_SECONDS_MAX:
            raise ValueError(
                f"job kind {kind!r}: backoff_cap_seconds must be between 0 and {BACKOFF_CAP_SECONDS_MAX:g}"
            )

        def decorate(handler: Handler) -> Handler:
            if kind in self._specs:
                raise ValueError(f"job kind {kind!r} is registered twice")
            self._specs[kind] = HandlerSpec(
                kind,
                handler,
                max_attempts,
                timeout_seconds,
                external_side_effects,
                backoff_base_seconds,
                backoff_cap_seconds,
            )
            return handler

        return decorate

    def get(self, kind: str) -> HandlerSpec | None:
        return self._specs.get(kind)

    def kinds(self) -> frozenset[str]:
        return frozenset(self._specs)

    def default_max_attempts(self, kind: str) -> int:
        spec = self._specs.get(kind)
        return spec.max_attempts if spec else MAX_ATTEMPTS_DEFAULT
