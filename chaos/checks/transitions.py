"""States follow the documented lifecycle (docs/LIFECYCLE.md): each job's recorded transitions form one
unbroken chain of allowed steps; what only a person may do was done by one; a cancel acknowledged is
never followed by success; every state a client read is one the job was in; a dependent starts only
after its dependencies succeeded; a paused kind's jobs are not claimed; the latest result is never an
older version's."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from chaos.handlers import PAUSABLE
from chaos.history import Entry
from chaos.model import ENDED_OR_UNDECIDED, Exchange, Run, Violation, job_reads, violation

ALLOWED: dict[str | None, frozenset[str]] = {
    None: frozenset({"pending", "blocked", "superseded", "failed", "cancelled"}),
    "pending": frozenset({"running", "cancelled", "superseded", "failed"}),
    "blocked": frozenset({"pending", "failed", "cancelled", "superseded"}),
    # running to running is a cancel request: it raises the sequence and starts nothing.
    "running": frozenset(
        {"running", "succeeded", "failed", "cancelled", "retry_wait", "outcome_unknown", "pending", "superseded"}
    ),
    "retry_wait": frozenset({"pending", "running", "cancelled", "superseded", "failed"}),
    "failed": frozenset({"pending", "blocked"}),
    "cancelled": frozenset({"pending", "blocked"}),
    "outcome_unknown": frozenset({"pending", "blocked", "cancelled"}),
    "succeeded": frozenset(),
    "superseded": frozenset(),
}
RISK_ACCEPTED = "duplicate risk accepted"
# A claim whose statement began before a pause committed carries a time after the pause's answer when it
# waited on a lock: held, at worst, by a worker stopped mid-transaction by a fault (seconds) or a
# transaction whose COMMIT the proxy delays. A claim later than this after the answer saw the pause.
PAUSE_SLACK_SECONDS = 10.0


def _is_manual_retry(event: Entry) -> bool:
    return event["from_state"] in ENDED_OR_UNDECIDED and event["to_state"] in ("pending", "blocked")


def check_transitions(run: Run) -> Iterator[Violation]:
    for job_id, events in run.events.items():
        previous: Entry | None = None
        for event in events:
            yield from _step(job_id, previous, event)
            previous = event


def _step(job_id: str, previous: Entry | None, event: Entry) -> Iterator[Violation]:
    expected_sequence = 1 if previous is None else int(previous["sequence"]) + 1
    expected_from = None if previous is None else previous["to_state"]
    if int(event["sequence"]) != expected_sequence or event["from_state"] != expected_from:
        yield violation(
            "broken_history", job_id, f"event {event['sequence']} does not follow the one before it", previous, event
        )
        return
    source, target = event["from_state"], str(event["to_state"])
    if target not in ALLOWED.get(source, frozenset()):
        yield violation("undocumented_transition", job_id, f"{source} -> {target}", previous, event)
    elif _is_manual_retry(event):
        reason, actor = str(event["reason"]), str(event["actor"])
        if not reason.startswith("manual retry") or actor.startswith(("worker:", "system")):
            yield violation("automatic_reopen", job_id, f"{source} -> {target} by {actor}: {reason}", previous, event)
        elif source == "outcome_unknown" and RISK_ACCEPTED not in reason:
            yield violation("blind_retry", job_id, f"OUTCOME_UNKNOWN reopened without consent: {reason}", event)


def check_no_success_after_cancel(run: Run) -> Iterator[Violation]:
    """Once CancelJob answered OK, the job does not succeed unless someone retried it since."""
    for exchange in run.exchanges:
        if exchange.op != "cancel" or not exchange.ok or exchange.foreign or exchange.answer is None:
            continue
        job = exchange.answer["job"]
        for event in run.events.get(str(job["job_id"]), []):
            if int(event["sequence"]) <= int(job["sequence"]):
                continue
            if _is_manual_retry(event):
                break
            if event["to_state"] == "succeeded":
                yield violation(
                    "succeeded_after_cancel",
                    str(job["job_id"]),
                    "SUCCEEDED after the cancel was acknowledged",
                    exchange.call,
                    exchange.answer,
                    event,
                )
                break


def check_reads(run: Run) -> Iterator[Violation]:
    """Each state a client was told, at the sequence it was told with, is the state the job was in then;
    a WatchJob stream's sequences only rise."""
    for _, entry, job_id, sequence, state in job_reads(run.exchanges):
        events = run.events.get(job_id)
        if not events:
            continue
        recorded = next((e for e in events if int(e["sequence"]) == sequence), None)
        if recorded is None or recorded["to_state"] != state:
            yield violation(
                "read_inconsistent", job_id, f"read {state} at sequence {sequence}, recorded otherwise", entry, recorded
            )
    for exchange in run.exchanges:
        sequences = [int(e["sequence"]) for e in exchange.streamed]
        if any(later <= earlier for earlier, later in zip(sequences, sequences[1:], strict=False)):
            yield violation(
                "watch_out_of_order",
                str(exchange.call["job_id"]),
                f"streamed sequences {sequences}",
                *exchange.streamed,
            )


def check_dependencies(run: Run) -> Iterator[Violation]:
    """A job with dependencies is first claimed only after each of them succeeded."""
    succeeded_at = {
        job_id: float(e["at"]) for job_id, events in run.events.items() for e in events if e["to_state"] == "succeeded"
    }
    for job_id, job in run.jobs.items():
        claims = run.claims(job_id)
        if not claims or not job["depends_on"]:
            continue
        for dependency in job["depends_on"]:
            done = succeeded_at.get(str(dependency))
            if done is None or done > float(claims[0]["at"]):
                yield violation(
                    "dependency_not_done",
                    job_id,
                    f"claimed before its dependency {dependency} succeeded",
                    claims[0],
                    run.jobs.get(str(dependency)),
                )


def check_pauses(run: Run) -> Iterator[Violation]:
    """No job of a paused kind is claimed between the pause's answer and the resume's call."""
    windows: list[tuple[float, float, Entry]] = []
    paused_since: Entry | None = None
    for exchange in run.exchanges:
        if exchange.op == "pause_kind" and exchange.ok and paused_since is None:
            paused_since = exchange.answer
        elif exchange.op == "resume_kind" and paused_since is not None:
            windows.append((paused_since.t, exchange.call.t, paused_since))
            paused_since = None
    if not windows:
        return
    for job_id, job in run.jobs.items():
        if job["kind"] != PAUSABLE:
            continue
        for claim in run.claims(job_id):
            at = float(claim["at"])
            for start, end, pause in windows:
                if start + PAUSE_SLACK_SECONDS < at < end:
                    yield violation("claimed_while_paused", job_id, f"{PAUSABLE} claimed while paused", pause, claim)


def check_latest_results(run: Run) -> Iterator[Violation]:
    """GetLatestResult answers a version at least as high as every version acknowledged before the call."""
    # (line, submission acknowledged or question asked), replayed in the order the history recorded them.
    timeline: list[tuple[int, Exchange]] = []
    for exchange in run.exchanges:
        if exchange.answer is not None and exchange.ok and exchange.op == "submit":
            timeline.append((exchange.answer.line, exchange))
        elif exchange.answer is not None and exchange.ok and exchange.op == "latest_result":
            timeline.append((exchange.call.line, exchange))
    acknowledged: dict[tuple[str, str], int] = defaultdict(int)
    for _, exchange in sorted(timeline, key=lambda pair: pair[0]):
        answer = exchange.answer
        assert answer is not None
        if exchange.op == "submit":
            for item in exchange.call["items"]:
                if item["resource_key"]:
                    key = (exchange.tenant, str(item["resource_key"]))
                    acknowledged[key] = max(acknowledged[key], int(item["version"]))
            continue
        key = (exchange.tenant, str(exchange.call["resource_key"]))
        job = run.jobs.get(str(answer["result_job_id"]))
        version = int(job["resource_version"]) if job else 0
        if version < acknowledged[key] or version != int(answer["version"]):
            yield violation(
                "stale_latest_result",
                str(answer["result_job_id"]),
                f"latest of {key[1]} answered version {version}; {acknowledged[key]} was acknowledged before",
                exchange.call,
                answer,
            )
