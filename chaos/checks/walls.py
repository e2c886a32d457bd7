"""Tenants are walls: no answer to one tenant names another's job, a probe for another tenant's job is
answered exactly as for a job that does not exist, and a handler runs a job under the job's own tenant."""

from __future__ import annotations

from collections.abc import Iterator

from chaos.calls import INDETERMINATE
from chaos.model import Exchange, Run, Violation, violation


def _named_jobs(exchange: Exchange) -> Iterator[str]:
    answer = exchange.answer
    if answer is None or not exchange.ok:
        return
    record = answer.record
    if exchange.op == "submit":
        yield from (str(job_id) for job_id, _ in record["jobs"])
    elif exchange.op == "list":
        yield from (str(job_id) for job_id, _, _ in record["jobs"])
    if "job" in record:
        yield str(record["job"]["job_id"])
    if "result_job_id" in record:
        yield str(record["result_job_id"])
    yield from (str(streamed["job_id"]) for streamed in exchange.streamed)


def check_tenant_walls(run: Run) -> Iterator[Violation]:
    for exchange in run.exchanges:
        if not exchange.tenant:
            continue  # the operator sees every tenant by design
        answered = exchange.code
        if exchange.foreign and answered is not None and answered != "NOT_FOUND" and answered not in INDETERMINATE:
            yield violation(
                "tenant_wall",
                str(exchange.call["job_id"]),
                f"{exchange.tenant} asked for another tenant's job and was answered {answered}, not NOT_FOUND",
                exchange.call,
                exchange.answer,
            )
        for job_id in _named_jobs(exchange):
            job = run.jobs.get(job_id)
            if job is not None and job["tenant"] != exchange.tenant:
                yield violation(
                    "tenant_wall",
                    job_id,
                    f"{exchange.tenant} was shown a job of {job['tenant']}",
                    exchange.call,
                    exchange.answer,
                    job,
                )
    for (job_id, _), attempt in run.attempts.items():
        job = run.jobs.get(job_id)
        for start in attempt.starts:
            if job is not None and start["tenant"] != job["tenant"]:
                yield violation(
                    "tenant_wall", job_id, f"a handler ran {job['tenant']}'s job as {start['tenant']}", start, job
                )
