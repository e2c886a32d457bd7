"""Ships what handlers log to the API, so that it is kept with the attempt: lines gather per lease and go
in one AppendJobLogs call per interval for every running job, and an attempt's last lines go before its
report. A handler may log as much as it likes: past the per-attempt bound lines are only counted, and
one closing line says how many were not kept."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Iterator

from durable_jobs.logs import BoundedLog, LogLine
from shared.domain.ids import JobId
from shared.domain.job_logs import LOG_LINES_PER_CALL_MAX, AttemptLog
from shared.domain.jobs import LeaseRef
from shared.pause import pause
from worker_service.api_client import ApiClient, ApiUnreachable

log = logging.getLogger(__name__)
# Lines are kept on a best-effort basis: a call that cannot get through soon is dropped, so that a
# worker cut off from the API does not pile up memory (the attempt's outcome is reported regardless).
SEND_DEADLINE_SECONDS = 5.0


# Guards the first line's making of a sink's bound and numbering, from whichever thread writes it first.
_FIRST_LINE_LOCK = threading.Lock()


class LeaseLog:
    """One attempt's sink (durable_jobs.logs.LogSink): numbers its lines and counts them against the bound.
    Both are made at the first line: most attempts log none, and a bound and a lock per job showed."""

    def __init__(self, shipper: LogShipper, lease: LeaseRef) -> None:
        self._shipper = shipper
        self._lease = lease
        self._lines: tuple[BoundedLog, Iterator[int]] | None = None

    def write(self, line: LogLine) -> None:
        bound, sequence = self._lines or self._first_line()
        if bound.admit():
            self._shipper.put(self._lease, next(sequence), line)  # next() of a count is atomic

    def close(self) -> None:
        """The attempt has ended: says how many lines were not kept, if any."""
        if self._lines is None:
            return
        bound, sequence = self._lines
        closing = bound.closing_line()
        if closing is not None:
            self._shipper.put(self._lease, next(sequence), closing)

    def _first_line(self) -> tuple[BoundedLog, Iterator[int]]:
        with _FIRST_LINE_LOCK:
            if self._lines is None:
                self._lines = (BoundedLog(), itertools.count(1))
            return self._lines


class LogShipper:
    def __init__(self, api: ApiClient, *, interval_seconds: float) -> None:
        self._api = api
        self._interval = interval_seconds
        # Written from handlers' threads as well as the loop.
        self._lock = threading.Lock()
        self._pending: dict[JobId, tuple[LeaseRef, list[tuple[int, LogLine]]]] = {}
        # Jobs being released: their lines wait for take() and travel with the release, one call.
        self._held: set[JobId] = set()
        self._ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Held while a periodic send is under way: an attempt's last lines wait for it, since lines it
        # carries would be refused once the attempt's report has ended the lease.
        self._sending = asyncio.Lock()

    def sink(self, lease: LeaseRef) -> LeaseLog:
        return LeaseLog(self, lease)

    def put(self, lease: LeaseRef, sequence: int, line: LogLine) -> None:
        """From any thread: adds the line to the lease's unsent ones."""
        with self._lock:
            self._pending.setdefault(lease.job_id, (lease, []))[1].append((sequence, line))
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
            async with self._sending:
                with self._lock:
                    batch = [p for job_id, p in self._pending.items() if job_id not in self._held]
                    self._pending = {job_id: p for job_id, p in self._pending.items() if job_id in self._held}
                await self._send(batch)
            await pause(self._interval)

    def holds(self, job_id: JobId) -> bool:
        """Whether flush() has anything to do: most jobs log nothing, and need not await it."""
        return job_id in self._pending or self._sending.locked()

    async def flush(self, job_id: JobId) -> None:
        """Sends the job's unsent lines now: the attempt is about to end, and its last words must land."""
        if not self.holds(job_id):
            return  # nothing of the job's unsent, nor on its way
        async with self._sending:
            with self._lock:
                pending = self._pending.pop(job_id, None)
            if pending is not None:
                await self._send([pending])

    def hold(self, job_id: JobId) -> None:
        """The job is to be released: its lines stay unsent until take(), so that they go with the release
        rather than in a periodic call of their own."""
        with self._lock:
            self._held.add(job_id)

    async def take(self, job_id: JobId) -> tuple[tuple[int, LogLine], ...]:
        """The job's unsent lines, no longer pending: they travel with the attempt's release. Lines past
        what one call may carry (only an attempt that logged its whole bound in one interval) go first."""
        async with self._sending:
            with self._lock:
                pending = self._pending.pop(job_id, None)
                self._held.discard(job_id)
            if pending is None:
                return ()
            lease, lines = pending
            if len(lines) > LOG_LINES_PER_CALL_MAX:
                await self._send([(lease, lines[:-LOG_LINES_PER_CALL_MAX])])
        return tuple(lines[-LOG_LINES_PER_CALL_MAX:])

    def forget(self, job_id: JobId) -> None:
        if job_id not in self._pending and job_id not in self._held:
            return
        with self._lock:
            self._pending.pop(job_id, None)
            self._held.discard(job_id)

    async def _send(self, batch: list[tuple[LeaseRef, list[tuple[int, LogLine]]]]) -> None:
        chunk: list[AttemptLog] = []
        size = 0
        for lease, lines in batch:
            for start in range(0, len(lines), LOG_LINES_PER_CALL_MAX):
                part = lines[start : start + LOG_LINES_PER_CALL_MAX]
                if size + len(part) > LOG_LINES_PER_CALL_MAX or any(c.job_id == lease.job_id for c in chunk):
                    await self._send_one(chunk)
                    chunk, size = [], 0
                chunk.append(AttemptLog(lease, tuple(part)))
                size += len(part)
        await self._send_one(chunk)

    async def _send_one(self, chunk: list[AttemptLog]) -> None:
        if not chunk:
            return
        try:
            await self._api.append_logs(chunk, deadline=time.monotonic() + SEND_DEADLINE_SECONDS)
        except ApiUnreachable as exc:
            log.debug("log lines of %d jobs dropped: %s", len(chunk), exc)
