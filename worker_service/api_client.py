"""WorkerService calls with the worker's credential. A refusal arrives as a value (ReportOutcome) in every
answer this client reads: the batches, the heartbeat, checkpoints and dependency results; gRPC errors
become the worker's own exceptions here."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from durable_jobs.handlers import CheckpointRefused
from jobs.v1 import worker_pb2, worker_pb2_grpc
from shared.domain.checkpoints import Checkpoint, ProgressReport
from shared.domain.ids import JobId
from shared.domain.job_logs import AttemptLog
from shared.domain.jobs import (
    Completion,
    FailureReport,
    JobState,
    LeaseRef,
    LeaseStatus,
    ReleaseReport,
    ReportOutcome,
)
from shared.domain.results import RESULT_LIMIT_BYTES_DEFAULT
from shared.pause import pause
from worker_service import convert
from worker_service.transport_security import ClientTlsFiles

log = logging.getLogger(__name__)

T = TypeVar("T")
_INDETERMINATE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
CALL_TIMEOUT_SECONDS = 10.0
# gRPC's default; raised with the result limit.
RECEIVE_BYTES_MIN = 4 * 1024 * 1024
# A call still gets this long when its deadline is (nearly) spent: one last try rather than none.
CALL_TIMEOUT_MIN_SECONDS = 0.5
# The most leases one Heartbeat may carry (the API refuses more: INVALID_ARGUMENT).
HEARTBEAT_BATCH_MAX = 1000
# Retries of an indeterminate failure back off from the first delay, doubling up to the cap.
RETRY_DELAY_FIRST_SECONDS = 0.05
RETRY_DELAY_MAX_SECONDS = 2.0


class ApiUnreachable(Exception):
    """The API did not answer before the report's deadline; the lease decides what happens next."""


class CredentialRejected(Exception):
    """The API refused the worker token: a configuration error, not worth retrying."""


class ApiClient:
    def __init__(
        self,
        target: str,
        token: str,
        worker_id: str,
        tls: ClientTlsFiles | None = None,
        *,
        max_result_bytes: int = RESULT_LIMIT_BYTES_DEFAULT,
    ) -> None:
        # A page of dependency results holds a result of up to the limit: answers as large as the API's.
        receive = [("grpc.max_receive_message_length", max(RECEIVE_BYTES_MIN, 2 * max_result_bytes + 64 * 1024))]
        if tls is None:
            self._channel = grpc.aio.insecure_channel(target, options=receive)
        else:
            self._channel = grpc.aio.secure_channel(
                target, tls.credentials(), options=[*tls.channel_options(), *receive]
            )
        self._stub = worker_pb2_grpc.WorkerServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"), ("jobs-worker-id", worker_id))
        self._worker_id = worker_id
        self.reachable = asyncio.Event()

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method: Callable[..., Awaitable[T]], request: Message, *, deadline: float) -> T:
        """Retries indeterminate failures with jittered backoff until `deadline` (monotonic)."""
        delay = RETRY_DELAY_FIRST_SECONDS
        while True:
            try:
                # Never past the report's own deadline: a 10 s call would outlive a 2 s release at shutdown.
                timeout = min(CALL_TIMEOUT_SECONDS, max(deadline - time.monotonic(), CALL_TIMEOUT_MIN_SECONDS))
                response = await method(request, metadata=self._metadata, timeout=timeout)
                self.reachable.set()
                return response
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    raise CredentialRejected(error.details()) from None
                if code not in _INDETERMINATE:
                    raise
                self.reachable.clear()
                if time.monotonic() + delay > deadline:
                    raise ApiUnreachable(f"{code.name}: {error.details()}") from None
                await pause(delay * random.uniform(0.5, 1.0))
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
            statuses.extend(convert.lease_status_from_proto(s) for s in response.leases)
        return statuses

    async def complete_many(self, completions: list[Completion], *, deadline: float) -> list[ReportOutcome]:
        response = await self._call(
            self._stub.CompleteJobs, convert.complete_jobs_request(completions), deadline=deadline
        )
        return convert.outcomes_from_proto(response.outcomes)

    async def fail_many(self, reports: list[FailureReport], *, deadline: float) -> list[JobState | ReportOutcome]:
        response = await self._call(self._stub.FailJobs, convert.fail_jobs_request(reports), deadline=deadline)
        return [convert.accepted_state_from_proto(o.outcome, o.state, JobState.FAILED) for o in response.outcomes]

    async def fail(self, report: FailureReport, *, deadline: float) -> JobState | ReportOutcome:
        (outcome,) = await self.fail_many([report], deadline=deadline)
        return outcome

    async def release_many(self, reports: list[ReleaseReport], *, deadline: float) -> list[JobState | ReportOutcome]:
        response = await self._call(self._stub.ReleaseJobs, convert.release_jobs_request(reports), deadline=deadline)
        return [convert.accepted_state_from_proto(o.outcome, o.state, JobState.PENDING) for o in response.outcomes]

    async def release(self, report: ReleaseReport, *, deadline: float) -> JobState | ReportOutcome:
        (outcome,) = await self.release_many([report], deadline=deadline)
        return outcome

    async def record_checkpoint(
        self, lease: LeaseRef, stage: str, data: bytes, *, deadline: float
    ) -> Checkpoint | ReportOutcome:
        """The stored checkpoint or the fencing refusal; CheckpointRefused when it is out of bounds."""
        request = worker_pb2.RecordCheckpointRequest(
            job_id=lease.job_id, fencing_token=lease.fencing_token, stage=stage, data=data
        )
        try:
            response = await self._call(self._stub.RecordCheckpoint, request, deadline=deadline)
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                raise CheckpointRefused(f"checkpoint {stage[:64]!r}: {error.details()}") from None
            raise
        outcome = convert.outcome_from_proto(response.outcome)
        if outcome is not ReportOutcome.ACCEPTED:
            return outcome
        return convert.checkpoint_from_proto(response.checkpoint)

    async def report_progress(self, reports: list[ProgressReport], *, deadline: float) -> list[ReportOutcome]:
        response = await self._call(
            self._stub.ReportProgress, convert.report_progress_request(reports), deadline=deadline
        )
        return [convert.outcome_from_proto(o.outcome) for o in response.outcomes]

    async def append_logs(self, logs: list[AttemptLog], *, deadline: float) -> list[ReportOutcome]:
        response = await self._call(self._stub.AppendJobLogs, convert.append_logs_request(logs), deadline=deadline)
        return [convert.outcome_from_proto(o.outcome) for o in response.outcomes]

    async def dependency_results(self, lease: LeaseRef, *, deadline: float) -> dict[JobId, bytes] | ReportOutcome:
        """Every page of the leased job's dependency results, or the refusal when the lease is no longer held."""
        results: dict[JobId, bytes] = {}
        after = ""
        while True:
            request = worker_pb2.GetDependencyResultsRequest(
                job_id=lease.job_id, fencing_token=lease.fencing_token, after_job_id=after
            )
            response = await self._call(self._stub.GetDependencyResults, request, deadline=deadline)
            # Unset from an API that refused with an error instead: an answer is then a page.
            outcome = convert.outcome_from_proto(response.outcome) if response.outcome else ReportOutcome.ACCEPTED
            if outcome is not ReportOutcome.ACCEPTED:
                return outcome
            results.update((JobId(r.job_id), r.payload) for r in response.results)
            if not response.next_after_job_id:
                return results
            after = response.next_after_job_id
