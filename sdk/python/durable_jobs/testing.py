"""Running a handler in a unit test, without a database, an API or a worker.

    from shared.handlers.testing import run_handler
    assert run_handler(resize, b'{"url": "...", "width": 64}') == b"..."

Receipts, checkpoints and progress are kept in memory for the context's lifetime: after `context_for`,
`ctx.receipt_book.receipts`, `ctx.checkpoints` and `ctx.progress_sink.reports` show what the handler
recorded. `context_for(checkpoints={...})` stands for stages an earlier attempt finished, and
`context_for(dependency_results={job_id: result})` for what the job's dependencies produced.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from durable_jobs.handlers import Handler, HandlerRegistry, JobContext
from durable_jobs.ids import FencingToken, JobId, TenantId
from durable_jobs.records import Checkpoint, Receipt, encode_checkpoint_data


@dataclass
class MemoryReceiptBook:
    """Receipts of one context's attempt, kept in memory; `earlier` stands for earlier attempts'."""

    attempt: int
    fencing_token: FencingToken
    receipts: list[Receipt] = field(default_factory=list)

    async def record_intent(self, step: str, intent: bytes) -> None:
        now = datetime.now(UTC)
        self.receipts.append(Receipt(self.attempt, step, self.fencing_token, intent, None, now, None))

    async def confirm(self, step: str, receipt: bytes) -> None:
        for index, existing in enumerate(self.receipts):
            if existing.attempt == self.attempt and existing.step == step and existing.receipt is None:
                self.receipts[index] = Receipt(
                    existing.attempt, step, existing.fencing_token, existing.intent, receipt,
                    existing.recorded_at, datetime.now(UTC),
                )  # fmt: skip
                return
        raise ValueError(f"no intent recorded for {step!r}")

    async def list(self) -> list[Receipt]:
        return list(self.receipts)


@dataclass
class MemoryCheckpointBook:
    """Checkpoints of one context's attempt, kept in memory."""

    attempt: int
    fencing_token: FencingToken

    async def record(self, stage: str, data: bytes) -> Checkpoint:
        return self.record_blocking(stage, data)

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        return Checkpoint(stage, data, self.attempt, self.fencing_token, datetime.now(UTC))


@dataclass
class MemoryProgress:
    """Every progress value a handler reported, in order (a worker sends fewer: the latest per interval)."""

    reports: list[tuple[float, str]] = field(default_factory=list)

    def report(self, fraction: float, message: str) -> None:
        self.reports.append((fraction, message))


@dataclass
class MemoryDependencyResults:
    """The results of the jobs a context's job depends on, as given."""

    results: dict[JobId, bytes] = field(default_factory=dict)

    async def read(self) -> dict[JobId, bytes]:
        return self.read_blocking()

    def read_blocking(self) -> dict[JobId, bytes]:
        return dict(self.results)


def context_for(
    payload: bytes = b"",
    *,
    kind: str = "test",
    attempt: int = 1,
    max_attempts: int = 3,
    tenant: str = "test-tenant",
    earlier_receipts: list[Receipt] | None = None,
    checkpoints: dict[str, object] | None = None,
    dependency_results: dict[str, bytes] | None = None,
) -> JobContext:
    """A context as a worker would build it for `attempt`, with in-memory receipts, checkpoints,
    progress and dependency results. `checkpoints` maps the stages an earlier attempt finished to their
    data (bytes or JSON); `dependency_results` maps dependency job ids to their results."""
    token = FencingToken(attempt)
    earlier = {
        stage: Checkpoint(stage, encode_checkpoint_data(data), max(attempt - 1, 1), FencingToken(1), datetime.now(UTC))
        for stage, data in (checkpoints or {}).items()
    }
    return JobContext(
        job_id=JobId("00000000-0000-4000-8000-000000000001"),
        tenant=TenantId(tenant),
        kind=kind,
        payload=payload,
        attempt=attempt,
        max_attempts=max_attempts,
        fencing_token=token,
        receipt_book=MemoryReceiptBook(attempt, token, list(earlier_receipts or [])),
        checkpoints=earlier,
        checkpoint_book=MemoryCheckpointBook(attempt, token),
        progress_sink=MemoryProgress(),
        dependency_source=MemoryDependencyResults({JobId(k): v for k, v in (dependency_results or {}).items()}),
    )


def run_handler(handler: Handler | HandlerRegistry, payload: bytes = b"", *, kind: str = "test", **context: Any) -> Any:
    """Runs a handler (or a registry's handler for `kind`) once, as the worker would, and returns what
    it returned; the HandlerError it raised propagates. `context` takes context_for's keywords."""
    if isinstance(handler, HandlerRegistry):
        spec = handler.get(kind)
        if spec is None:
            raise KeyError(f"no kind {kind!r} in the registry")
        handler = spec.handler
    ctx = context_for(payload, kind=kind, **context)
    result = handler(ctx)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(result: Any) -> Any:
    return await result
