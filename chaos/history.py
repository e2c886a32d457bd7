"""The history of a chaos run: one JSON object per line, in one file that every process taking part
appends to (the runner's clients and fault injector, each worker's handlers, and at the end the final
state of the database). Each record is written with a single write() on a file opened O_APPEND, so
records of concurrent writers never interleave and a process killed with SIGKILL loses at most the
record it had not yet written. A record's line number (from 1) is how violations point at it.

Every record has `t` (seconds since the epoch, this machine's clock: the clock the database stamps its
rows with too), `src` (who wrote it) and `ev` (what it is); docs/CHAOS.md lists the events and fields.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where a worker's handlers append their records (set by the runner in the worker's environment).
HISTORY_FILE_ENV = "CHAOS_HISTORY_FILE"

Record = Mapping[str, Any]


class HistoryWriter:
    """Appends records for one source; safe to share between threads, and between processes by path."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def record(self, event: str, **fields: Any) -> None:
        entry = {"t": round(time.time(), 6), "src": self.source, "ev": event, **fields}
        line = (json.dumps(entry, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            # os.write may write less than asked only for huge lines on a full disk; then the record is torn
            # and the reader reports it rather than guessing.
            os.write(self._fd, line)

    def for_source(self, source: str) -> HistoryWriter:
        """Another source writing to the same file."""
        return HistoryWriter(self.path, source)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


@dataclass(frozen=True)
class Entry:
    line: int
    record: Record

    @property
    def event(self) -> str:
        return str(self.record["ev"])

    @property
    def t(self) -> float:
        return float(self.record["t"])

    def __getitem__(self, name: str) -> Any:
        return self.record[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.record.get(name, default)


@dataclass(frozen=True)
class History:
    entries: list[Entry]
    # Lines that were not a whole JSON object (a writer killed mid-line): counted, never guessed at.
    torn_lines: list[int]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def of(self, *events: str) -> Iterator[Entry]:
        wanted = set(events)
        return (entry for entry in self.entries if entry.event in wanted)


def read_history(path: Path) -> History:
    entries: list[Entry] = []
    torn: list[int] = []
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, text in enumerate(lines, start=1):
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                torn.append(number)
                continue
            if not isinstance(record, dict) or "ev" not in record or "t" not in record:
                torn.append(number)
                continue
            entries.append(Entry(number, record))
    return History(entries, torn)
