"""Accepted means durable, and nothing accepted is forgotten: every acknowledged submission is exactly one
job, a definite refusal stored nothing, and every job ended or waits where a person can see it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from chaos.history import Entry
from chaos.model import TERMINAL, Exchange, Run, Violation, violation

# Still moving on their own: after the run settled, none may be left in these.
MOVING = frozenset({"pending", "retry_wait", "running"})


def _submissions(run: Run) -> dict[str, list[tuple[Exchange, int]]]:
    """Each submission id with every call that carried it, and its item's place in that call."""
    calls: dict[str, list[tuple[Exchange, int]]] = defaultdict(list)
    for exchange in run.exchanges:
        if exchange.op == "submit":
            for position, item in enumerate(exchange.call["items"]):
                calls[str(item["sub"])].append((exchange, position))
    return calls


def _stored_by_submission(run: Run) -> dict[str, list[Entry]]:
    stored: dict[str, list[Entry]] = defaultdict(list)
    for job in run.jobs.values():
        stored[str((job["labels"] or {}).get("chaos_sub", ""))].append(job)
    return stored


def check_acknowledged(run: Run) -> Iterator[Violation]:
    """An OK answer names the one job of its submission, stored for that tenant, kind and key."""
    stored = _stored_by_submission(run)
    for sub, calls in _submissions(run).items():
        answered: dict[str, Entry] = {}
        for exchange, position in calls:
            if not exchange.ok or exchange.answer is None:
                continue
            job_id, _created = exchange.answer["jobs"][position]
            answered.setdefault(str(job_id), exchange.answer)
            job = run.jobs.get(str(job_id))
            item = exchange.call["items"][position]
            if job is None:
                yield violation(
                    "acknowledged_lost",
                    str(job_id),
                    f"submission {sub} was acknowledged, its job is not stored",
                    exchange.call,
                    exchange.answer,
                )
            elif (job["tenant"], job["kind"], job["idempotency_key"]) != (
                exchange.tenant,
                item["kind"],
                item["key"] or None,
            ):
                yield violation(
                    "acknowledged_mismatch",
                    str(job_id),
                    f"submission {sub} was answered with a job of another tenant, kind or key",
                    exchange.call,
                    exchange.answer,
                    job,
                )
        jobs = stored.get(sub, [])
        if len(answered) > 1 or len(jobs) > 1:
            ids = sorted({*answered, *(str(j["job_id"]) for j in jobs)})
            yield violation(
                "duplicate_job",
                ids[0],
                f"submission {sub} made {len(ids)} jobs: {', '.join(ids)}",
                *answered.values(),
                *jobs,
                *(exchange.call for exchange, _ in calls),
            )
        yield from _refused(sub, calls, jobs)


def _refused(sub: str, calls: list[tuple[Exchange, int]], jobs: list[Entry]) -> Iterator[Violation]:
    """A definite error means not stored: the job of a submission whose every answer was definite and
    none OK must not exist, and a resubmission of a stored one must get it back, not a refusal."""
    answers = [exchange for exchange, _ in calls if exchange.answer is not None]
    if not jobs or not answers or any(exchange.ok for exchange in answers):
        return
    indeterminate = [e for e in answers if e.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")]
    last = answers[-1]
    if last.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"):
        return  # the client gave up while the answer was still unknown: stored or not, both are allowed
    check = "resubmission_refused" if indeterminate else "refused_but_stored"
    yield violation(
        check,
        str(jobs[0]["job_id"]),
        f"submission {sub} was answered {last.code} yet its job is stored",
        last.call,
        last.answer,
        jobs[0],
    )


def check_no_phantoms(run: Run) -> Iterator[Violation]:
    """Every stored job was asked for by some client."""
    submitted = set(_submissions(run))
    for job in run.jobs.values():
        sub = str((job["labels"] or {}).get("chaos_sub", ""))
        if sub not in submitted:
            yield violation("phantom_job", str(job["job_id"]), "a job no client submitted", job)


def check_settled(run: Run) -> Iterator[Violation]:
    """Once the faults ended and the run waited, every job ended or waits visibly for a reason that holds:
    a person (OUTCOME_UNKNOWN), or a dependency that itself still waits."""
    settled = run.markers.get("run.settled")
    for job_id, job in run.jobs.items():
        state = str(job["state"])
        if state in MOVING and not run.settled:
            yield violation(
                "unsettled", job_id, f"still {state} after the run waited for every job to settle", job, settled
            )
        if state == "blocked":
            dependencies = [run.jobs.get(str(d)) for d in job["depends_on"] or []]
            if all(d is not None and d["state"] in TERMINAL for d in dependencies):
                yield violation(
                    "unsettled",
                    job_id,
                    "blocked on dependencies that have all ended",
                    job,
                    *(d for d in dependencies if d is not None),
                )
