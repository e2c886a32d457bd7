"""Calls to the API as a chaos run's clients make them: every call and every answer into the history, an
indeterminate answer told apart from a definite one, and the API replica chosen afresh for each call."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from chaos.history import HistoryWriter
from jobs.v1 import jobs_pb2
from shared.rpc_error_details import rpc_error_details

T = TypeVar("T")
CALL_TIMEOUT_SECONDS = 5.0
# The answers after which a call may or may not have taken effect: the contract's indeterminate ones, and
# an overload whose RetryInfo says to come back. Any other error is a definite "not done".
INDETERMINATE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})
RESUBMIT_DELAY_FIRST_SECONDS = 0.05
RESUBMIT_DELAY_MAX_SECONDS = 1.0
# Reconnect quickly to a replica that came back: gRPC's default backoff grows to two minutes.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def state_name(state: int) -> str:
    """`running` for JOB_STATE_RUNNING: the database's spelling, which the checker compares against."""
    return jobs_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()


def job_fields(job: jobs_pb2.Job) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "state": state_name(job.state),
        "sequence": job.sequence,
        "cancel_requested": job.cancel_requested,
    }


@dataclass(frozen=True)
class Answer:
    code: str
    reason: str = ""
    response: Any = None
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.code == "OK"

    @property
    def indeterminate(self) -> bool:
        return self.code in INDETERMINATE


@dataclass
class Caller:
    """One client's identity (a tenant's token, or the operator's) and its record of what it asked and heard."""

    name: str
    token: str
    tenant: str
    history: HistoryWriter
    rng: random.Random
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # The call under way, for the records a streaming call writes as it goes.
    current_call: str = ""

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    async def call(
        self,
        op: str,
        invoke: Callable[[tuple[tuple[str, str], ...], float], Awaitable[T]],
        describe: Callable[[T], dict[str, Any]],
        **fields: Any,
    ) -> Answer:
        """Records the call, makes it, and records the answer with what `describe` makes of a response."""
        call_id = f"{self.name}-{next(self._numbers)}"
        self.history.record("call", id=call_id, op=op, tenant=self.tenant, **fields)
        self.current_call = call_id
        try:
            response = await invoke(self.metadata, CALL_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as error:
            details = rpc_error_details(error)
            answer = Answer(
                error.code().name,
                details.reason if details else "",
                retry_after=details.retry_after_seconds if details else None,
            )
            fields_named = [field for field, _ in details.field_violations] if details else []
            self.history.record("answer", id=call_id, code=answer.code, reason=answer.reason, fields=fields_named)
            return answer
        self.history.record("answer", id=call_id, code="OK", reason="", **describe(response))
        return Answer("OK", response=response)


def submit_items(requests: Sequence[jobs_pb2.SubmitJobRequest]) -> list[dict[str, Any]]:
    """What the history keeps of each submitted item: enough to tell which job it must have made."""
    return [
        {
            "sub": request.labels["chaos_sub"],
            "key": request.idempotency_key,
            "kind": request.kind,
            "resource_key": request.resource_key or None,
            "version": request.resource_version or None,
            "depends_on": list(request.depends_on),
        }
        for request in requests
    ]


async def backoff(delay: float, rng: random.Random) -> float:
    """Waits a jittered `delay`; returns the next one."""
    await asyncio.sleep(delay * rng.uniform(0.5, 1.0))
    return min(delay * 2, RESUBMIT_DELAY_MAX_SECONDS)


Metadata = tuple[tuple[str, str], ...]


def unary(method: Callable[..., Awaitable[T]], request: Message) -> Callable[[Metadata, float], Awaitable[T]]:
    """A stub's unary call with `request`, as `Caller.call` makes it."""
    return lambda metadata, timeout: method(request, metadata=metadata, timeout=timeout)
