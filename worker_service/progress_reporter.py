"""Coalesces handlers' progress and sends it in one ReportProgress call per interval: a handler may
report as often as it likes, and each job costs the database at most one write per interval (the
latest value wins), plus the final value, flushed before the attempt's report."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from shared.domain.checkpoints import ProgressReport
from shared.domain.ids import JobId
from shared.domain.jobs import LeaseRef
from shared.pause import pause
from worker_service.api_client import ApiClient, ApiUnreachable

log = logging.getLogger(__name__)
PROGRESS_INTERVAL_SECONDS_DEFAULT = 1.0
# Progress is informational: a call that cannot get through soon is dropped, the next value follows.
SEND_DEADLINE_SECONDS = 5.0
# The API's bound on one call.
REPORTS_PER_CALL_MAX = 1000


class LeaseProgress:
    """One attempt's sink (shared.handlers.api.ProgressSink)."""

    def __init__(self, reporter: ProgressReporter, lease: LeaseRef) -> None:
        self._reporter = reporter
        self._lease = lease

    def report(self, fraction: float, message: str) -> None:
        self._reporter.put(ProgressReport(self._lease, fraction, message))


class ProgressReporter:
    def __init__(self, api: ApiClient, *, interval_seconds: float) -> None:
        self._api = api
        self._interval = interval_seconds
        # Written from handlers' threads as well as the loop.
        self._lock = threading.Lock()
        self._pending: dict[JobId, ProgressReport] = {}
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def sink(self, lease: LeaseRef) -> LeaseProgress:
        return LeaseProgress(self, lease)

    def put(self, report: ProgressReport) -> None:
        """From any thread: replaces the job's unsent value."""
        with self._lock:
            self._pending[report.job_id] = report
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._ready.set)
        else:  # not running yet: run() looks at what is pending first
            self._ready.set()

    async def run(self) -> None:
        """Sends what is pending, then waits out the interval; cancelled at shutdown."""
        self._loop = asyncio.get_running_loop()
        while True:
            await self._ready.wait()
            self._ready.clear()
            with self._lock:
                batch, self._pending = list(self._pending.values()), {}
            await self._send(batch)
            await pause(self._interval)

    def holds(self, job_id: JobId) -> bool:
        """Whether flush() has anything to send: most jobs report no progress, and need not await it."""
        return job_id in self._pending

    async def flush(self, job_id: JobId) -> None:
        """Sends the job's unsent value now: the attempt is about to end, and its last word must land."""
        if not self.holds(job_id):  # no lock for a job with nothing to send
            return
        with self._lock:
            report = self._pending.pop(job_id, None)
        if report is not None:
            await self._send([report])

    def forget(self, job_id: JobId) -> None:
        if job_id not in self._pending:
            return
        with self._lock:
            self._pending.pop(job_id, None)

    async def _send(self, batch: list[ProgressReport]) -> None:
        for start in range(0, len(batch), REPORTS_PER_CALL_MAX):
            chunk = batch[start : start + REPORTS_PER_CALL_MAX]
            try:
                await self._api.report_progress(chunk, deadline=time.monotonic() + SEND_DEADLINE_SECONDS)
            except ApiUnreachable as exc:
                log.debug("progress of %d jobs dropped: %s", len(chunk), exc)
