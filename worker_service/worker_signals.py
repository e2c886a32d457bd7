"""What a worker did, raised for tests to wait on (River's testsignal): a Worker built without a
WorkerSignals pays one None check per event and keeps nothing."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass


class Signal(enum.StrEnum):
    CLAIMED = "claimed"
    # A report the API answered; `detail` is its outcome (a ReportOutcome or the job's new state).
    REPORTED = "reported"
    # A report that never reached the API before its deadline.
    UNREPORTED = "unreported"
    STOPPED = "stopped"


@dataclass(frozen=True)
class SignalRecord:
    signal: Signal
    job_id: str = ""
    # For REPORTED: "completed", "failed" or "released".
    report: str = ""
    detail: str = ""


class WorkerSignals:
    def __init__(self) -> None:
        self.records: list[SignalRecord] = []
        self._changed = asyncio.Event()

    def emit(self, record: SignalRecord) -> None:
        self.records.append(record)
        self._changed.set()

    async def wait_for(self, matches: Callable[[SignalRecord], bool]) -> SignalRecord:
        """The first record, old or new, that `matches`; bound the wait with asyncio.timeout()."""
        seen = 0
        while True:
            for record in self.records[seen:]:
                if matches(record):
                    return record
            seen = len(self.records)
            self._changed.clear()
            await self._changed.wait()
