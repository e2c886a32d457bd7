"""The workload of a chaos run. Per tenant, clients that submit (single and batch, each item with its
idempotency key; with dependencies; new versions of a resource), cancel, retry (accepting the duplicate
risk only sometimes), read, watch, and probe other tenants' jobs; and an operator who sets the limits
and pauses and resumes a kind. Every choice comes from a generator seeded from the run's seed.

An indeterminate answer to a submission is resubmitted, as the contract says: the same request with the
same idempotency key, until a definite answer.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos import handlers
from chaos.calls import (
    RESUBMIT_DELAY_FIRST_SECONDS,
    Answer,
    Caller,
    backoff,
    job_fields,
    state_name,
    submit_items,
    unary,
)
from jobs.v1 import jobs_pb2, jobs_pb2_grpc

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "superseded"})
RETRYABLE = frozenset({"failed", "cancelled", "outcome_unknown"})
# A tenant's clients stop submitting while they know of this many unfinished jobs, and read instead.
OPEN_JOBS_MAX = 40
THINK_SECONDS_MAX = 0.1
WATCH_SECONDS = 2.0
RESOURCE_KEYS = 4
# Relative weights of the operations a client picks from.
OPERATIONS = {
    "submit": 30,
    "submit_batch": 6,
    "submit_dependent": 6,
    "submit_version": 7,
    "cancel": 8,
    "retry": 7,
    "get": 12,
    "get_result": 6,
    "list": 3,
    "watch": 2,
    "latest_result": 4,
    "probe_foreign": 4,
}
SUBMIT_KINDS = {
    handlers.QUICK: 8,
    handlers.FLAKY: 5,
    handlers.INTENT: 5,
    handlers.LONG: 3,
    handlers.LIMITED: 4,
    handlers.PAUSABLE: 3,
    handlers.BLOCKING: 2,
}


@dataclass
class Known:
    job_id: str
    kind: str
    state: str


@dataclass
class TenantBook:
    """What one tenant's clients have learned, shared between them."""

    jobs: dict[str, Known] = field(default_factory=dict)
    # Highest version handed out per resource key (acknowledged or not).
    versions: dict[str, int] = field(default_factory=dict)
    submissions: int = 0

    def open_jobs(self) -> int:
        return sum(1 for job in self.jobs.values() if job.state not in TERMINAL and job.state != "outcome_unknown")

    def learn(self, job_id: str, state: str) -> None:
        known = self.jobs.get(job_id)
        if known is not None:
            known.state = state


def payload_for(kind: str, rng: random.Random) -> dict[str, Any]:
    if kind == handlers.FLAKY:
        category = rng.choice(["retryable", "retryable", "crash", "permanent", "unknown"])
        return {"fail": rng.randint(0, 3), "category": category}
    if kind == handlers.INTENT:
        return {"call_seconds": round(rng.uniform(0.05, 1.0), 3)}
    if kind == handlers.LONG:
        # Up to 25 s: longer than a cancel may take to stop it, so that an ignored cancel would show.
        return {"stages": rng.randint(2, 10), "stage_seconds": round(rng.uniform(0.3, 2.5), 3)}
    if kind in (handlers.LIMITED, handlers.BLOCKING):
        return {"seconds": round(rng.uniform(0.1, 1.5), 3)}
    return {}


class Client:
    def __init__(
        self,
        caller: Caller,
        stubs: Sequence[jobs_pb2_grpc.JobServiceStub],
        books: dict[str, TenantBook],
    ) -> None:
        self.caller = caller
        self._stubs = stubs
        self._books = books
        self._book = books[caller.tenant]
        self._rng = caller.rng
        self._operations: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
            "submit": self.submit,
            "submit_batch": self.submit_batch,
            "submit_dependent": self.submit_dependent,
            "submit_version": self.submit_version,
            "cancel": self.cancel,
            "retry": self.retry,
            "get": self.get,
            "get_result": self.get_result,
            "list": self.list_jobs,
            "watch": self.watch,
            "latest_result": self.latest_result,
            "probe_foreign": self.probe_foreign,
        }

    async def run(self, stop: asyncio.Event) -> None:
        names, weights = list(OPERATIONS), list(OPERATIONS.values())
        while not stop.is_set():
            name = self._rng.choices(names, weights)[0]
            if name.startswith("submit") and self._book.open_jobs() >= OPEN_JOBS_MAX:
                name = "get"
            await self._operations[name]()
            await asyncio.sleep(self._rng.uniform(0.0, THINK_SECONDS_MAX))

    def _stub(self) -> jobs_pb2_grpc.JobServiceStub:
        return self._rng.choice(self._stubs)

    # Submissions

    def _request(self, kind: str, **fields: Any) -> jobs_pb2.SubmitJobRequest:
        self._book.submissions += 1
        sub = f"{self.caller.name}-{self._book.submissions}"
        return jobs_pb2.SubmitJobRequest(
            kind=kind,
            payload=json.dumps(payload_for(kind, self._rng)).encode(),
            idempotency_key=f"key-{sub}",
            max_attempts=self._rng.choice([0, 0, 3, 10]),
            labels={"chaos_sub": sub},
            **fields,
        )

    def _kind(self) -> str:
        return self._rng.choices(list(SUBMIT_KINDS), list(SUBMIT_KINDS.values()))[0]

    def resubmission(self, request: jobs_pb2.SubmitJobRequest) -> jobs_pb2.SubmitJobRequest:
        """What is sent again after an indeterminate answer: the same request, its key and all."""
        return request

    async def _submit(self, requests: list[jobs_pb2.SubmitJobRequest], batch: bool) -> None:
        """Sends until the answer is definite; once sent, a submission is never abandoned."""
        delay, resubmission = RESUBMIT_DELAY_FIRST_SECONDS, 0
        while True:
            answer = await self._send(requests, batch, resubmission)
            if not answer.indeterminate:
                break
            delay = await backoff(max(delay, answer.retry_after or 0.0), self._rng)
            requests = [self.resubmission(request) for request in requests]
            resubmission += 1
        if answer.ok:
            results = answer.response.results if batch else [answer.response]
            for request, result in zip(requests, results, strict=True):
                self._book.jobs.setdefault(result.job.job_id, Known(result.job.job_id, request.kind, "pending"))
                self._book.learn(result.job.job_id, state_name(result.job.state))

    async def _send(self, requests: list[jobs_pb2.SubmitJobRequest], batch: bool, resubmission: int) -> Answer:
        stub = self._stub()
        items = submit_items(requests)
        if batch:
            return await self.caller.call(
                "submit",
                unary(stub.SubmitJobs, jobs_pb2.SubmitJobsRequest(jobs=requests)),
                lambda response: {"jobs": [[r.job.job_id, r.created] for r in response.results]},
                items=items,
                batch=True,
                resubmission=resubmission,
            )
        return await self.caller.call(
            "submit",
            unary(stub.SubmitJob, requests[0]),
            lambda response: {"jobs": [[response.job.job_id, response.created]]},
            items=items,
            batch=False,
            resubmission=resubmission,
        )

    async def submit(self) -> None:
        await self._submit([self._request(self._kind())], batch=False)

    async def submit_kind(self, kind: str, payload: dict[str, Any] | None = None, **fields: Any) -> str | None:
        """One submission of `kind` (its payload given, else drawn), resubmitted until definite; the job
        id when it was accepted. For scripted scenarios."""
        request = self._request(kind, **fields)
        if payload is not None:
            request.payload = json.dumps(payload).encode()
        before = set(self._book.jobs)
        await self._submit([request], batch=False)
        created = [job_id for job_id in self._book.jobs if job_id not in before]
        return created[0] if created else None

    async def cancel_job(self, job_id: str) -> Answer:
        stub = self._stub()
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason="chaos")
        return await self._job_call("cancel", job_id, unary(stub.CancelJob, request))

    async def submit_batch(self) -> None:
        requests = [
            self._request(self._rng.choice([handlers.QUICK, handlers.FLAKY, handlers.INTENT])) for _ in range(4)
        ]
        requests = requests[: self._rng.randint(2, 4)]
        if self._rng.random() < 0.3:
            # Two items with one key and one request are one job.
            requests.append(requests[0])
        await self._submit(requests, batch=True)

    async def submit_dependent(self) -> None:
        recent = list(self._book.jobs)[-30:]
        if not recent:
            return await self.submit()
        depends_on = self._rng.sample(recent, k=min(len(recent), self._rng.randint(1, 2)))
        kind = self._rng.choice([handlers.QUICK, handlers.FLAKY])
        await self._submit([self._request(kind, depends_on=depends_on)], batch=False)

    async def submit_version(self) -> None:
        key = f"doc-{self._rng.randrange(RESOURCE_KEYS)}"
        highest = self._book.versions.get(key, 0)
        if highest and self._rng.random() < 0.1:
            version = highest  # an equal or older version: stored, and superseded at once when older
        else:
            version = self._book.versions[key] = highest + 1
        kind = self._rng.choice([handlers.QUICK, handlers.LONG])
        await self._submit([self._request(kind, resource_key=key, resource_version=version)], batch=False)

    # Changes and reads of one job

    def _pick(self, states: frozenset[str] | None = None, *, prefer_open: bool = False) -> str | None:
        jobs = list(self._book.jobs.values())
        if states is not None:
            jobs = [job for job in jobs if job.state in states]
        if prefer_open and self._rng.random() < 0.7:
            jobs = [job for job in jobs if job.state not in TERMINAL] or jobs
        return self._rng.choice(jobs).job_id if jobs else None

    async def _job_call(
        self, op: str, job_id: str, send: Callable[..., Any], foreign: bool = False, **fields: Any
    ) -> Answer:
        answer = await self.caller.call(
            op,
            send,
            lambda response: {"job": job_fields(response)},
            job_id=job_id,
            foreign=foreign,
            **fields,
        )
        if answer.ok and not foreign:
            self._book.learn(job_id, state_name(answer.response.state))
        return answer

    async def cancel(self) -> None:
        job_id = self._pick(prefer_open=True)
        if job_id is not None:
            await self.cancel_job(job_id)

    async def retry(self) -> None:
        job_id = self._pick(RETRYABLE)
        if job_id is None:
            return
        unknown = self._book.jobs[job_id].state == "outcome_unknown"
        accept = self._rng.random() < (0.7 if unknown else 0.2)
        stub = self._stub()
        request = jobs_pb2.RetryJobRequest(job_id=job_id, reason="chaos", accept_duplicate_risk=accept)
        answer = await self._job_call(
            "retry",
            job_id,
            unary(stub.RetryJob, request),
            accept_risk=accept,
        )
        if answer.reason == "DUPLICATE_RISK_NOT_ACCEPTED" and self._rng.random() < 0.5:
            # A person looked at the outside system and decided to run it again.
            request = jobs_pb2.RetryJobRequest(job_id=job_id, reason="chaos, checked", accept_duplicate_risk=True)
            await self._job_call(
                "retry",
                job_id,
                unary(stub.RetryJob, request),
                accept_risk=True,
            )

    async def get(self) -> None:
        job_id = self._pick(prefer_open=True)
        if job_id is None:
            return
        stub = self._stub()
        request = jobs_pb2.GetJobRequest(job_id=job_id)
        await self._job_call("get", job_id, unary(stub.GetJob, request))

    async def get_result(self) -> None:
        job_id = self._pick(frozenset({"succeeded"})) or self._pick()
        if job_id is None:
            return
        stub = self._stub()
        request = jobs_pb2.GetJobResultRequest(job_id=job_id)
        await self.caller.call(
            "get_result",
            unary(stub.GetJobResult, request),
            lambda result: {
                "result_job_id": result.job_id,
                "payload": result.payload.decode(errors="replace"),
                "token": result.fencing_token,
                "attempt": result.attempt,
            },
            job_id=job_id,
            foreign=False,
        )

    async def list_jobs(self) -> None:
        stub = self._stub()
        request = jobs_pb2.ListJobsRequest(page_size=50)
        answer = await self.caller.call(
            "list",
            unary(stub.ListJobs, request),
            lambda response: {"jobs": [[j.job_id, j.sequence, state_name(j.state)] for j in response.jobs]},
        )
        if answer.ok:
            for job in answer.response.jobs:
                self._book.learn(job.job_id, state_name(job.state))

    async def watch(self) -> None:
        job_id = self._pick(prefer_open=True)
        if job_id is None:
            return
        stub = self._stub()
        request = jobs_pb2.WatchJobRequest(job_id=job_id)

        async def follow(metadata: tuple[tuple[str, str], ...], _: float) -> int:
            """For a while only: the stream ends with DEADLINE_EXCEEDED unless the job ends first."""
            seen = 0
            async for job in stub.WatchJob(request, metadata=metadata, timeout=WATCH_SECONDS):
                seen += 1
                self.caller.history.record("watch.state", call=self.caller.current_call, **job_fields(job))
                self._book.learn(job_id, state_name(job.state))
            return seen

        await self.caller.call("watch", follow, lambda seen: {"states": seen}, job_id=job_id, foreign=False)

    async def latest_result(self) -> None:
        if not self._book.versions:
            return
        key = self._rng.choice(sorted(self._book.versions))
        stub = self._stub()
        request = jobs_pb2.GetLatestResultRequest(resource_key=key)
        await self.caller.call(
            "latest_result",
            unary(stub.GetLatestResult, request),
            lambda response: {
                "result_job_id": response.result.job_id,
                "version": response.resource_version,
                "payload": response.result.payload.decode(errors="replace"),
            },
            resource_key=key,
        )

    async def probe_foreign(self) -> None:
        """Another tenant's job asked for with this tenant's token: must be NOT_FOUND, like a missing one."""
        others = [book for tenant, book in self._books.items() if tenant != self.caller.tenant and book.jobs]
        if not others:
            return
        job_id = self._rng.choice(list(self._rng.choice(others).jobs))
        stub = self._stub()
        op = self._rng.choice(["get", "cancel", "retry", "get_result"])
        if op == "get_result":
            await self.caller.call(
                "get_result",
                unary(stub.GetJobResult, jobs_pb2.GetJobResultRequest(job_id=job_id)),
                lambda result: {"result_job_id": result.job_id},
                job_id=job_id,
                foreign=True,
            )
            return
        retry = jobs_pb2.RetryJobRequest(job_id=job_id, reason="probe", accept_duplicate_risk=True)
        send = {
            "get": unary(stub.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)),
            "cancel": unary(stub.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id, reason="probe")),
            "retry": unary(stub.RetryJob, retry),
        }[op]
        await self._job_call(op, job_id, send, foreign=True)
