"""A chaos run's history, indexed the way the checks read it: calls with their answers, handler attempts
by job and token, the final database rows by job, and the pauses each process went through."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chaos.history import Entry, History

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "superseded"})
# The states only a person's RetryJob leaves for pending or blocked.
ENDED_OR_UNDECIDED = frozenset({"failed", "cancelled", "outcome_unknown"})
PAUSE_KINDS = frozenset({"worker_pause", "lease_pause", "api_pause"})


@dataclass(frozen=True)
class Violation:
    check: str
    job_id: str | None
    message: str
    lines: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check, "job_id": self.job_id, "message": self.message, "history_lines": list(self.lines)}


def violation(check: str, job_id: str | None, message: str, *evidence: Entry | None) -> Violation:
    return Violation(check, job_id, message, tuple(sorted({e.line for e in evidence if e is not None})))


@dataclass
class Exchange:
    """A call a client (or the operator) made, with its answer when one came."""

    call: Entry
    answer: Entry | None = None
    # WatchJob's streamed states, in order.
    streamed: list[Entry] = field(default_factory=list)

    @property
    def op(self) -> str:
        return str(self.call["op"])

    @property
    def tenant(self) -> str:
        return str(self.call["tenant"])

    @property
    def code(self) -> str | None:
        return None if self.answer is None else str(self.answer["code"])

    @property
    def ok(self) -> bool:
        return self.code == "OK"

    @property
    def foreign(self) -> bool:
        return bool(self.call.get("foreign", False))


@dataclass
class Attempt:
    """One attempt as its handler recorded it: what it ran under, what it did, how it ended."""

    job_id: str
    token: int
    starts: list[Entry] = field(default_factory=list)
    end: Entry | None = None
    intents: list[Entry] = field(default_factory=list)
    confirms: list[Entry] = field(default_factory=list)
    checkpoints: list[Entry] = field(default_factory=list)

    @property
    def start(self) -> Entry | None:
        return self.starts[0] if self.starts else None

    @property
    def worker(self) -> str:
        source = str(self.start["src"]) if self.start else ""
        return source.removeprefix("handler:")

    def called_out(self) -> Entry | None:
        """The intent line of an external call this attempt may have made, unless it saw it confirmed."""
        intent = next((e for e in self.intents if e["ok"]), None)
        confirmed = any(e["ok"] for e in self.confirms)
        return None if confirmed else intent


@dataclass(frozen=True)
class Pause:
    target: str
    start: float
    end: float
    entry: Entry


@dataclass
class Run:
    config: dict[str, Any]
    exchanges: list[Exchange]
    attempts: dict[tuple[str, int], Attempt]
    jobs: dict[str, Entry]
    events: dict[str, list[Entry]]
    results: dict[str, list[Entry]]
    receipts: dict[str, list[Entry]]
    writes: dict[str, list[tuple[Entry, str, float]]]
    faults: list[Entry]
    pauses: dict[str, list[Pause]]
    markers: dict[str, Entry]
    # Service processes that exited on their own (the runner started them again).
    exits: list[Entry]
    torn_lines: list[int]

    def claims(self, job_id: str) -> list[Entry]:
        """Events that started an attempt (a cancel request is running to running, and starts none)."""
        return [e for e in self.events.get(job_id, []) if e["to_state"] == "running" and e["from_state"] != "running"]

    def attempts_of(self, job_id: str) -> Iterator[Attempt]:
        return (a for (job, _), a in self.attempts.items() if job == job_id)

    def paused_seconds(self, target: str, start: float, end: float) -> float:
        """How much of [start, end] the process `target` spent stopped."""
        return sum(max(0.0, min(end, p.end) - max(start, p.start)) for p in self.pauses.get(target, []))

    @property
    def settled(self) -> bool:
        marker = self.markers.get("run.settled")
        return bool(marker and marker["settled"])


def build_run(history: History) -> Run:
    run = Run(
        config={},
        exchanges=[],
        attempts={},
        jobs={},
        events=defaultdict(list),
        results=defaultdict(list),
        receipts=defaultdict(list),
        writes=defaultdict(list),
        faults=[],
        pauses=defaultdict(list),
        markers={},
        exits=[],
        torn_lines=history.torn_lines,
    )
    by_call: dict[str, Exchange] = {}
    pause_starts: dict[int, Entry] = {}
    for entry in history:
        event = entry.event
        if event == "call":
            by_call[entry["id"]] = exchange = Exchange(entry)
            run.exchanges.append(exchange)
        elif event == "answer" and entry["id"] in by_call:
            by_call[entry["id"]].answer = entry
        elif event == "watch.state" and entry["call"] in by_call:
            by_call[entry["call"]].streamed.append(entry)
        elif event.startswith("handler."):
            _add_handler_entry(run, entry)
        elif event.startswith("db."):
            _add_row(run, entry)
        elif event == "fault":
            _add_fault(run, entry, pause_starts)
        elif event == "process.exited":
            run.exits.append(entry)
        elif event.startswith(("run.", "faults.")):
            run.markers[event] = entry
            if event == "run.start":
                run.config = dict(entry.record)
    for events in run.events.values():
        events.sort(key=lambda e: int(e["sequence"]))
    return run


def _add_handler_entry(run: Run, entry: Entry) -> None:
    key = (str(entry["job_id"]), int(entry["token"]))
    attempt = run.attempts.setdefault(key, Attempt(*key))
    event = entry.event
    if event == "handler.start":
        attempt.starts.append(entry)
    elif event == "handler.end":
        attempt.end = entry
    elif event == "handler.intent":
        attempt.intents.append(entry)
    elif event == "handler.confirm":
        attempt.confirms.append(entry)
    elif event == "handler.checkpoint":
        attempt.checkpoints.append(entry)


def _add_row(run: Run, entry: Entry) -> None:
    event, job_id = entry.event, str(entry["job_id"])
    if event == "db.job":
        run.jobs[job_id] = entry
    elif event == "db.event":
        run.events[job_id].append(entry)
    elif event == "db.result":
        run.results[job_id].append(entry)
    elif event == "db.receipt":
        run.receipts[job_id].append(entry)
        run.writes[job_id].append((entry, "intent recorded", float(entry["recorded_at"])))
        if entry["confirmed_at"] is not None:
            run.writes[job_id].append((entry, "call confirmed", float(entry["confirmed_at"])))
    elif event == "db.checkpoint":
        run.writes[job_id].append((entry, f"checkpoint {entry['stage']}", float(entry["at"])))
    elif event == "db.attempt_error":
        run.writes[job_id].append((entry, "failure reported", float(entry["at"])))


def _add_fault(run: Run, entry: Entry, pause_starts: dict[int, Entry]) -> None:
    phase = entry["phase"]
    if phase in ("start", "instant"):
        run.faults.append(entry)
    if entry["kind"] not in PAUSE_KINDS:
        return
    if phase == "start":
        pause_starts[int(entry["id"])] = entry
    elif phase == "end" and int(entry["id"]) in pause_starts:
        start = pause_starts.pop(int(entry["id"]))
        run.pauses[str(entry["target"])].append(Pause(str(entry["target"]), start.t, entry.t, start))


def job_reads(exchanges: Iterable[Exchange]) -> Iterator[tuple[Exchange, Entry, str, int, str]]:
    """Every (job id, sequence, state) a client was told, with the exchange and line that told it."""
    for exchange in exchanges:
        answer = exchange.answer
        if exchange.foreign:
            continue
        if answer is not None and exchange.ok and "job" in answer.record:
            job = answer["job"]
            yield exchange, answer, str(job["job_id"]), int(job["sequence"]), str(job["state"])
        if answer is not None and exchange.ok and exchange.op == "list":
            for job_id, sequence, state in answer["jobs"]:
                yield exchange, answer, str(job_id), int(sequence), str(state)
        for streamed in exchange.streamed:
            yield exchange, streamed, str(streamed["job_id"]), int(streamed["sequence"]), str(streamed["state"])
