"""The verdict on a chaos run's history: every check over the whole history (calls, answers, handler
records, faults and the database's final state), and the figures of the run. A pure function of the
history file, so a run can be checked again, or a history checked by itself: `python -m chaos check`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chaos.checks import leases, limits, results, submissions, transitions, walls
from chaos.config import STATEMENT_FAULT_KINDS
from chaos.history import History
from chaos.model import Run, Violation, build_run, violation

Check = Callable[[Run], Iterator[Violation]]
CHECKS: tuple[Check, ...] = (
    submissions.check_acknowledged,
    submissions.check_no_phantoms,
    submissions.check_settled,
    results.check_one_result_from_the_last_attempt,
    results.check_reads_of_results,
    leases.check_no_stale_writes,
    leases.check_no_blind_retry,
    leases.check_cancels_stop_handlers,
    transitions.check_transitions,
    transitions.check_no_success_after_cancel,
    transitions.check_reads,
    transitions.check_dependencies,
    transitions.check_pauses,
    transitions.check_latest_results,
    walls.check_tenant_walls,
    limits.check_limits,
)
# The JSON line lists this many violations at most; `violations_total` says how many there were.
VIOLATIONS_LISTED_MAX = 200


@dataclass
class Report:
    operations: int
    faults: dict[str, int]
    violations: list[Violation]
    figures: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "operations": self.operations,
            "faults": self.faults,
            "violations": [v.as_json() for v in self.violations[:VIOLATIONS_LISTED_MAX]],
            "violations_total": len(self.violations),
            "violations_by_check": dict(Counter(v.check for v in self.violations)),
            **self.figures,
        }

    def summary_line(self) -> str:
        return json.dumps(self.summary(), separators=(",", ":"), sort_keys=False)


def check_history(history: History) -> Report:
    run = build_run(history)
    violations = [found for check in CHECKS for found in check(run)]
    violations += [
        violation("process_exited", None, f"{e['target']} exited on its own with code {e['code']} (log {e['log']})", e)
        for e in run.exits
    ]
    if not run.markers.get("run.end"):
        violations.append(
            Violation("incomplete_history", None, "the history has no run.end: the run did not finish", ())
        )
    return Report(_operations(run), _faults(run), violations, _figures(run))


def _operations(run: Run) -> int:
    return len(run.exchanges)


def _faults(run: Run) -> dict[str, int]:
    counts: Counter[str] = Counter({kind: 0 for kind in run.config.get("faults", [])})
    counts.update(str(entry["kind"]) for entry in run.faults)
    statement = run.markers.get("faults.statement")
    for kind in STATEMENT_FAULT_KINDS:
        counts[kind] += int(statement["counts"].get(kind, 0)) if statement else 0
    return dict(sorted(counts.items()))


def _figures(run: Run) -> dict[str, Any]:
    states = Counter(str(job["state"]) for job in run.jobs.values())
    answers = Counter(exchange.code or "none" for exchange in run.exchanges)
    return {
        "seed": run.config.get("seed"),
        "seconds": run.config.get("seconds"),
        "jobs": len(run.jobs),
        "jobs_by_state": dict(sorted(states.items())),
        "attempts_recorded": len(run.attempts),
        "answers_by_code": dict(sorted(answers.items())),
        "settled": run.settled,
        "torn_history_lines": len(run.torn_lines),
    }
