"""Published at most once: a job has at most one result, it is the result an attempt's handler returned
under the job's last accepted fencing token, and every read of it is that same result."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from chaos.history import Entry
from chaos.model import Run, Violation, violation


def _parsed(payload: str) -> dict[str, Any] | None:
    try:
        decoded = json.loads(payload)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def check_one_result_from_the_last_attempt(run: Run) -> Iterator[Violation]:
    for job_id, job in run.jobs.items():
        results = run.results.get(job_id, [])
        successes = [e for e in run.events.get(job_id, []) if e["to_state"] == "succeeded"]
        if len(successes) > 1:
            yield violation("succeeded_twice", job_id, f"entered SUCCEEDED {len(successes)} times", *successes)
        if len(results) > 1:
            yield violation("two_results", job_id, f"{len(results)} results stored", *results)
        if job["state"] == "succeeded" and not results:
            yield violation("result_missing", job_id, "SUCCEEDED without a stored result", job, *successes)
        if results and job["state"] != "succeeded":
            yield violation(
                "result_without_success", job_id, f"a result is stored for a {job['state']} job", job, *results
            )
        for result in results:
            yield from _from_last_attempt(run, job_id, job, result)


def _from_last_attempt(run: Run, job_id: str, job: Entry, result: Entry) -> Iterator[Violation]:
    last_token = int(job["fencing_token"])
    produced = _parsed(str(result["payload"]))
    if produced is None or produced.get("job") != job_id:
        yield violation("result_not_from_an_attempt", job_id, "the stored result is no attempt's of this job", result)
        return
    token = int(produced["token"])
    attempt = run.attempts.get((job_id, token))
    returned = attempt.end if attempt and attempt.end and attempt.end.get("result") == result["payload"] else None
    claims = run.claims(job_id)
    if token != last_token or int(result["fencing_token"]) != last_token:
        yield violation(
            "result_from_stale_attempt",
            job_id,
            f"the stored result was returned under token {token}, the job's last accepted token is {last_token}",
            result,
            returned,
            *claims[-2:],
        )
    elif returned is None:
        yield violation(
            "result_not_from_an_attempt", job_id, f"no handler under token {token} returned the stored result", result
        )


def check_reads_of_results(run: Run) -> Iterator[Violation]:
    """GetJobResult and GetLatestResult answer the stored result and nothing else."""
    for exchange in run.exchanges:
        answer = exchange.answer
        if answer is None or not exchange.ok or exchange.op not in ("get_result", "latest_result") or exchange.foreign:
            continue
        job_id = str(answer["result_job_id"])
        stored = run.results.get(job_id, [])
        if not stored or stored[0]["payload"] != answer["payload"]:
            yield violation(
                "result_read_mismatch", job_id, "a client read a result other than the one stored", answer, *stored
            )
