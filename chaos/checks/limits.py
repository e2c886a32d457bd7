"""Limits hold under races: never more jobs running under a key than its max_running, replayed from the
recorded transitions in the database's time. The replay cannot overstate: a claim that needed the room a
job's end made was taken in a statement that began after that end committed, so its time is later."""

from __future__ import annotations

from collections.abc import Iterator

from chaos.history import Entry
from chaos.model import Run, Violation, violation


def _carries(job: Entry, key: str) -> bool:
    scope, _, name = key.partition(":")
    if scope == "kind":
        return bool(job["kind"] == name)
    if scope == "tenant":
        return bool(job["tenant"] == name)
    return key in (job["limit_keys"] or [])


def check_limits(run: Run) -> Iterator[Violation]:
    for key, max_running in dict(run.config.get("limits", {})).items():
        yield from _replay(run, str(key), int(max_running))


def _replay(run: Run, key: str, max_running: int) -> Iterator[Violation]:
    changes: list[tuple[float, int, Entry]] = []
    for job_id, job in run.jobs.items():
        if not _carries(job, key):
            continue
        for event in run.events.get(job_id, []):
            started = event["to_state"] == "running" and event["from_state"] != "running"
            stopped = event["from_state"] == "running" and event["to_state"] != "running"
            if started or stopped:
                # At one instant, ends count before starts.
                changes.append((float(event["at"]), 1 if started else -1, event))
    running: dict[str, Entry] = {}
    over = False
    for _, change, event in sorted(changes, key=lambda c: (c[0], c[1])):
        if change < 0:
            running.pop(str(event["job_id"]), None)
            over = over and len(running) > max_running
            continue
        running[str(event["job_id"])] = event
        if len(running) > max_running and not over:
            over = True  # one violation per stretch over the limit
            yield violation(
                "limit_exceeded",
                str(event["job_id"]),
                f"{len(running)} jobs running under {key} (max_running {max_running}): {', '.join(sorted(running))}",
                *running.values(),
            )
