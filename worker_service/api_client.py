"""WorkerService calls with the worker's credential. gRPC errors become the worker's own outcomes here."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from jobs.v1 import worker_pb2, worker_pb2_grpc
from shared.domain.jobs import Completion, JobError, JobState, LeaseRef, LeaseStatus, ReportOutcome
from shared.rpc_error_details import rpc_error_details
from worker_service import convert
from worker_service.transport_security import ClientTlsFiles

log = logging.getLogger(__name__)

T = TypeVar("T")
_INDETERMINATE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
_REFUSALS = {
    "LEASE_LOST": ReportOutcome.LEASE_LOST,
    "JOB_CANCELLED": ReportOutcome.JOB_CANCELLED,
    "JOB_SUPERSEDED": ReportOutcome.JOB_SUPERSEDED,
}
CALL_TIMEOUT_SECONDS = 10.0
# The most leases one Heartbeat may carry (the API refuses more: INVALID_ARGUMENT).
HEARTBEAT_BATCH_MAX = 1000
# Retries of an indeterminate failure back off from the first delay, doubling up to the cap.
RETRY_DELAY_FIRST_SECONDS = 0.05
RETRY_DELAY_MAX_SECONDS = 2.0


class ApiUnreachable(Exception):
    """The API did not answer before the report's deadline; the lease decides what happens next."""


class CredentialRejected(Exception):
    """The API refused the worker token: a configuration error, not worth retrying."""


def _refusal(error: grpc.aio.AioRpcError) -> ReportOutcome | None:
    """The fencing refusal a FAILED_PRECONDITION carries in its ErrorInfo, if it is one."""
    details = rpc_error_details(error)
    return _REFUSALS.get(details.reason) if details is not None else None


class ApiClient:
    def __init__(self, target: str, token: str, worker_id: str, tls: ClientTlsFiles | None = None) -> None:
        if tls is None:
            self._channel = grpc.aio.insecure_channel(target)
        else:
            self._channel = grpc.aio.secure_channel(target, tls.credentials(), options=tls.channel_options())
        self._stub = worker_pb2_grpc.WorkerServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"), ("jobs-worker-id", worker_id))
        self._worker_id = worker_id
        self.reachable = asyncio.Event()

    async def close(self) -> None:
        await self._channel.close()

    async def _call(
        self, method: Callable[..., Awaitable[T]], request: Message, *, deadline: float
    ) -> T | ReportOutcome:
        """Retries indeterminate failures with jittered backoff until `deadline` (monotonic)."""
        delay = RETRY_DELAY_FIRST_SECONDS
        while True:
            try:
                response = await method(request, metadata=self._metadata, timeout=CALL_TIMEOUT_SECONDS)
                self.reachable.set()
                return response
            except grpc.aio.AioRpcError as error:
                code = error.code()
                refusal = _refusal(error) if code == grpc.StatusCode.FAILED_PRECONDITION else None
                if refusal is not None:
                    self.reachable.set()
                    return refusal
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    raise CredentialRejected(error.details()) from None
                if code not in _INDETERMINATE:
                    raise
                self.reachable.clear()
                if time.monotonic() + delay > deadline:
                    raise ApiUnreachable(f"{code.name}: {error.details()}") from None
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, RETRY_DELAY_MAX_SECONDS)

    async def heartbeat(
        self, leases: list[LeaseRef], extend_by_seconds: float, *, deadline: float
    ) -> list[LeaseStatus]:
        """In calls of at most HEARTBEAT_BATCH_MAX leases: a replica may hold twice its concurrency. With
        none, one empty call still goes: its answer is how the worker learns that the API is reachable."""
        statuses: list[LeaseStatus] = []
        for start in range(0, max(len(leases), 1), HEARTBEAT_BATCH_MAX):
            chunk = leases[start : start + HEARTBEAT_BATCH_MAX]
            request = convert.heartbeat_request(self._worker_id, chunk, extend_by_seconds)
            response = await self._call(self._stub.Heartbeat, request, deadline=deadline)
            assert not isinstance(response, ReportOutcome)  # Heartbeat answers per lease, never refuses whole
            statuses.extend(convert.lease_status_from_proto(s) for s in response.leases)
        return statuses

    async def complete_many(self, completions: list[Completion], *, deadline: float) -> list[ReportOutcome]:
        response = await self._call(
            self._stub.CompleteJobs, convert.complete_jobs_request(completions), deadline=deadline
        )
        if isinstance(response, ReportOutcome):
            return [response] * len(completions)
        return [convert.outcome_from_proto(o.outcome) for o in response.outcomes]

    async def fail(self, lease: LeaseRef, error: JobError, *, deadline: float) -> JobState | ReportOutcome:
        response = await self._call(self._stub.FailJob, convert.fail_job_request(lease, error), deadline=deadline)
        if isinstance(response, ReportOutcome):
            return response
        return convert.state_from_proto(response.state) or JobState.FAILED

    async def release(
        self, lease: LeaseRef, *, started: bool, reason: str, deadline: float
    ) -> JobState | ReportOutcome:
        request = worker_pb2.ReleaseJobRequest(
            job_id=lease.job_id, fencing_token=lease.fencing_token, started=started, reason=reason
        )
        response = await self._call(self._stub.ReleaseJob, request, deadline=deadline)
        if isinstance(response, ReportOutcome):
            return response
        return convert.state_from_proto(response.state) or JobState.PENDING
