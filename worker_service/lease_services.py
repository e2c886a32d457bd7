"""One attempt's receipt book, checkpoint book, dependency results and progress sink (the SDK's protocols)
in one small object per job. Four objects per job, each with its references and the loop's thread, were
most of a job's context to build, and most handlers use none of them: each is made when first used."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from shared.domain.checkpoints import Checkpoint, ProgressReport
from shared.domain.ids import JobId
from shared.domain.jobs import LeaseRef, Receipt
from shared.storage.database import Database
from worker_service.api_client import ApiClient
from worker_service.checkpoint_book import ApiCheckpointBook
from worker_service.dependency_reader import ApiDependencyResults
from worker_service.progress_reporter import ProgressReporter
from worker_service.receipt_book import DatabaseReceiptBook


@dataclass(frozen=True, slots=True)
class ReplicaMeans:
    """What every attempt's services share, made once per replica on its event loop."""

    db: Database
    api: ApiClient
    progress: ProgressReporter
    # How long a checkpoint's recording may take: the lease's length.
    report_seconds: float
    # When a dependency read must have its answer by.
    report_deadline: Callable[[], float]
    loop: asyncio.AbstractEventLoop
    loop_thread: int


class LeaseServices:
    """Every write and read is fenced by `lease`, as the separate books' are."""

    __slots__ = ("_lease", "_means")

    def __init__(self, means: ReplicaMeans, lease: LeaseRef) -> None:
        self._means = means
        self._lease = lease

    # ReceiptBook
    async def record_intent(self, step: str, intent: bytes) -> None:
        await DatabaseReceiptBook(self._means.db, self._lease).record_intent(step, intent)

    async def confirm(self, step: str, receipt: bytes) -> None:
        await DatabaseReceiptBook(self._means.db, self._lease).confirm(step, receipt)

    async def list(self) -> list[Receipt]:
        return await DatabaseReceiptBook(self._means.db, self._lease).list()

    # CheckpointBook
    async def record(self, stage: str, data: bytes) -> Checkpoint:
        return await self._checkpoints().record(stage, data)

    def record_blocking(self, stage: str, data: bytes) -> Checkpoint:
        return self._checkpoints().record_blocking(stage, data)

    # DependencyResults
    async def read(self) -> dict[JobId, bytes]:
        return await self._dependencies().read()

    def read_blocking(self) -> dict[JobId, bytes]:
        return self._dependencies().read_blocking()

    # ProgressSink
    def report(self, fraction: float, message: str) -> None:
        self._means.progress.put(ProgressReport(self._lease, fraction, message))

    def _checkpoints(self) -> ApiCheckpointBook:
        means = self._means
        return ApiCheckpointBook(
            means.api, self._lease, report_seconds=means.report_seconds, loop=means.loop, loop_thread=means.loop_thread
        )

    def _dependencies(self) -> ApiDependencyResults:
        means = self._means
        return ApiDependencyResults(means.api, self._lease, means.report_deadline, means.loop, means.loop_thread)


def replica_means(
    db: Database,
    api: ApiClient,
    progress: ProgressReporter,
    report_seconds: float,
    report_deadline: Callable[[], float],
) -> ReplicaMeans:
    """Called on the replica's event loop."""
    return ReplicaMeans(
        db, api, progress, report_seconds, report_deadline, asyncio.get_running_loop(), threading.get_ident()
    )
