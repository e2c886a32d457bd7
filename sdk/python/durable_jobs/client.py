"""Calling the service: `Client` (blocking) and `AsyncClient` (asyncio), with the same methods.

    with Client("127.0.0.1:50051", token) as jobs:
        job = jobs.submit("image.resize", {"url": url, "width": 64})
        thumbnail = jobs.result(job.job_id, wait=True, timeout=60)

Accepted exactly once is the default: a submission without an idempotency key gets one made for it,
and an answer that leaves its fate open (UNAVAILABLE, DEADLINE_EXCEEDED: the job may have been committed
before the reply was lost) is sent again with the same key until the call's deadline, so it names the
same job. Reads are sent again the same way; cancel and retry are not (their second try could answer
for the first). Errors are durable_jobs.errors.JobsError subclasses.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio

from durable_jobs._proto.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from durable_jobs.errors import INDETERMINATE_CODES, JobNotSucceeded, from_rpc_error
from durable_jobs.jobs import Job, JobLogLine, JobState, Submission, Tls, submissions

__all__ = ["AsyncClient", "Client", "Submission", "Tls"]

TIMEOUT_SECONDS_DEFAULT = 30.0
# One try of a call that may be sent again gets at most this long, so that a hung connection leaves
# time for another try before the call's deadline.
TRY_SECONDS_MAX = 10.0
RETRY_PAUSE_SECONDS_FIRST = 0.1
RETRY_PAUSE_SECONDS_MAX = 2.0
# A broken WatchJob stream (not the job's end) is opened again from the last sequence seen, for as long
# as this without a message (an API replica restarting in a rolling deploy takes some seconds).
WATCH_RESUMABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
WATCH_RESUME_SECONDS_MAX = 30.0

_T = TypeVar("_T")


def _credentials(tls: Tls | bool | None) -> grpc.ChannelCredentials | None:
    """None for plaintext; `True` trusts the system's roots; a Tls names the files."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    return grpc.ssl_channel_credentials(
        root_certificates=Path(tls.ca_file).read_bytes() if tls.ca_file else None,
        private_key=Path(tls.key_file).read_bytes() if tls.key_file else None,
        certificate_chain=Path(tls.cert_file).read_bytes() if tls.cert_file else None,
    )


class _Deadline:
    """A call's deadline, split into tries with jittered, growing pauses between them."""

    def __init__(self, seconds: float | None) -> None:
        self._at = None if seconds is None else time.monotonic() + seconds
        self._pause = RETRY_PAUSE_SECONDS_FIRST

    def remaining(self) -> float | None:
        return None if self._at is None else max(self._at - time.monotonic(), 0.0)

    def try_timeout(self) -> float:
        remaining = self.remaining()
        return TRY_SECONDS_MAX if remaining is None else min(remaining, TRY_SECONDS_MAX)

    def next_pause(self) -> float | None:
        """How long to wait before the next try, or None when no try fits before the deadline."""
        pause = random.uniform(self._pause / 2, self._pause)
        self._pause = min(self._pause * 2, RETRY_PAUSE_SECONDS_MAX)
        remaining = self.remaining()
        return None if remaining is not None and pause >= remaining else pause


class _Resuming:
    """When a broken watch is opened again: after a resumable code, with growing pauses, until the
    watch's deadline or WATCH_RESUME_SECONDS_MAX without a message."""

    def __init__(self) -> None:
        self._pauses = _Deadline(None)
        self._since: float | None = None

    def reset(self) -> None:
        self._pauses, self._since = _Deadline(None), None

    def pause(self, code: grpc.StatusCode, deadline: _Deadline) -> float | None:
        if code not in WATCH_RESUMABLE_CODES:
            return None
        now = time.monotonic()
        self._since = now if self._since is None else self._since
        pause = self._pauses.next_pause()
        remaining = deadline.remaining()
        if pause is None or (remaining is not None and pause >= remaining):
            return None
        return None if now + pause - self._since > WATCH_RESUME_SECONDS_MAX else pause


def _settled_or_raise(job: Job) -> None:
    if job.state is not JobState.SUCCEEDED:
        error = f": {job.last_error.message}" if job.last_error else ""
        raise JobNotSucceeded(f"job {job.job_id} ended {job.state.name}{error}", job)


def _submit_request(kind: str, payload: object, fields: Mapping[str, Any]) -> jobs_pb2.SubmitJobRequest:
    return Submission(kind, payload, **fields).request()


class Client:
    """A blocking client of jobs.v1.JobService for one tenant (the token's). Thread-safe; close it, or
    use it as a context manager. `timeout` is every call's default deadline, in seconds."""

    def __init__(
        self, target: str, token: str, *, tls: Tls | bool | None = None, timeout: float = TIMEOUT_SECONDS_DEFAULT
    ) -> None:
        credentials = _credentials(tls)
        self._channel = (
            grpc.insecure_channel(target) if credentials is None else grpc.secure_channel(target, credentials)
        )
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout

    @property
    def channel(self) -> grpc.Channel:
        """The channel, for a service's other RPCs (a generated stub over it needs this client's
        `metadata` on each call)."""
        return self._channel

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(self, kind: str, payload: object = b"", *, timeout: float | None = None, **fields: Any) -> Job:
        """Submits one job and returns it (an earlier job when the idempotency key or, with
        `dedupe_by_input`, the input names one). `payload` is bytes, a str (UTF-8) or a JSON value (a
        dict, a list, a dataclass). `fields` are Submission's: idempotency_key, priority, run_after and
        deadline (an aware datetime or a timedelta from now), max_attempts, resource_key,
        resource_version, depends_on, labels, limit_keys, dedupe_by_input, sequence_key, singleton_key,
        debounce (a Debounce)."""
        request = _submit_request(kind, payload, fields)
        response = self._idempotent(self._stub.SubmitJob, request, timeout)
        return Job.from_proto(response.job)

    def submit_many(self, items: Iterable[Submission], *, timeout: float | None = None) -> list[Job]:
        """Submits all or none, in one call; each item without a key gets one made for it."""
        request = jobs_pb2.SubmitJobsRequest(jobs=submissions(items))
        response = self._idempotent(self._stub.SubmitJobs, request, timeout)
        return [Job.from_proto(item.job) for item in response.results]

    def get(self, job_id: str, *, timeout: float | None = None) -> Job:
        return Job.from_proto(self._idempotent(self._stub.GetJob, jobs_pb2.GetJobRequest(job_id=job_id), timeout))

    def result(self, job_id: str, *, wait: bool = False, timeout: float | None = None) -> bytes:
        """The job's stored result. Without `wait`, a job that has not succeeded is FailedPrecondition;
        with it, waits (at most `timeout` seconds, else for ever) until the job settles, and raises
        JobNotSucceeded when it ended any other way."""
        if wait:
            last = None
            for job in self.watch(job_id, timeout=timeout):
                last = job
            if last is not None:
                _settled_or_raise(last)
        request = jobs_pb2.GetJobResultRequest(job_id=job_id)
        result: jobs_pb2.JobResult = self._idempotent(self._stub.GetJobResult, request, None)
        return result.payload

    def watch(
        self, job_id: str, *, after_sequence: int = 0, include_progress: bool = False, timeout: float | None = None
    ) -> Iterator[Job]:
        """The job's states as they change, from `after_sequence` on, until it settles (a terminal state,
        or OUTCOME_UNKNOWN, which waits for a person); a dropped stream is resumed where it broke.
        `timeout` bounds the whole watch (DeadlineExceeded); None follows the job for as long as it takes."""
        deadline, last, resuming = _Deadline(timeout), after_sequence, _Resuming()
        while True:
            request = jobs_pb2.WatchJobRequest(job_id=job_id, after_sequence=last, include_progress=include_progress)
            stream = self._stub.WatchJob(request, timeout=deadline.remaining(), metadata=self._metadata)
            try:
                for message in stream:
                    resuming.reset()
                    job = Job.from_proto(message)
                    last = max(last, job.sequence)
                    yield job
                    if job.state.is_settled:
                        return
                return  # the API ends a stream only after a terminal state
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                exc.__traceback__ = None  # the call object is the error: no cycle left for exit time
                pause = resuming.pause(exc.code(), deadline)
                if pause is None:
                    raise error from None
                time.sleep(pause)
            finally:
                stream.cancel()

    def cancel(self, job_id: str, reason: str = "", *, timeout: float | None = None) -> Job:
        """Cancels a waiting job at once; a running one is asked to stop (`cancel_requested`)."""
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        return Job.from_proto(self._once(self._stub.CancelJob, request, timeout))

    def retry(
        self,
        job_id: str,
        reason: str,
        *,
        accept_duplicate_risk: bool = False,
        clear_checkpoints: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Runs a FAILED, CANCELLED or OUTCOME_UNKNOWN job again (the last needs accept_duplicate_risk)."""
        request = jobs_pb2.RetryJobRequest(
            job_id=job_id,
            reason=reason,
            accept_duplicate_risk=accept_duplicate_risk,
            clear_checkpoints=clear_checkpoints,
        )
        return Job.from_proto(self._once(self._stub.RetryJob, request, timeout))

    def events(self, job_id: str, *, timeout: float | None = None) -> list[jobs_pb2.JobEvent]:
        """The job's recorded history (ListJobEvents, every page), oldest first."""
        events: list[jobs_pb2.JobEvent] = []
        token = ""
        while True:
            request = jobs_pb2.ListJobEventsRequest(job_id=job_id, page_token=token)
            page = self._idempotent(self._stub.ListJobEvents, request, timeout)
            events.extend(page.events)
            if not page.next_page_token:
                return events
            token = page.next_page_token

    def logs(self, job_id: str, *, attempt: int = 0, timeout: float | None = None) -> list[JobLogLine]:
        """What the job's handlers logged (ListJobLogs, every page), oldest first; one attempt's with
        `attempt`."""
        lines: list[JobLogLine] = []
        token = ""
        while True:
            request = jobs_pb2.ListJobLogsRequest(job_id=job_id, attempt=attempt, page_token=token)
            page: jobs_pb2.ListJobLogsResponse = self._idempotent(self._stub.ListJobLogs, request, timeout)
            lines.extend(JobLogLine.from_proto(line) for line in page.lines)
            if not page.next_page_token:
                return lines
            token = page.next_page_token

    def _once(self, method: Callable[..., _T], request: object, timeout: float | None) -> _T:
        try:
            return method(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            exc.__traceback__ = None
            raise from_rpc_error(exc) from None

    def _idempotent(self, method: Callable[..., _T], request: object, timeout: float | None) -> _T:
        deadline = _Deadline(timeout or self._timeout)
        while True:
            try:
                return method(request, timeout=deadline.try_timeout(), metadata=self._metadata)
            except grpc.RpcError as exc:
                exc.__traceback__ = None
                pause = deadline.next_pause() if exc.code() in INDETERMINATE_CODES else None
                if pause is None:
                    raise from_rpc_error(exc) from None
            time.sleep(pause)


class AsyncClient:
    """Client's methods, awaitable, on grpc.aio; `watch` is an async iterator. Make and use it on one
    event loop; `await client.close()`, or use it as an async context manager."""

    def __init__(
        self, target: str, token: str, *, tls: Tls | bool | None = None, timeout: float = TIMEOUT_SECONDS_DEFAULT
    ) -> None:
        credentials = _credentials(tls)
        self._channel = (
            grpc.aio.insecure_channel(target) if credentials is None else grpc.aio.secure_channel(target, credentials)
        )
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def submit(self, kind: str, payload: object = b"", *, timeout: float | None = None, **fields: Any) -> Job:
        """Client.submit."""
        request = _submit_request(kind, payload, fields)
        response: jobs_pb2.SubmitJobResponse = await self._idempotent(self._stub.SubmitJob, request, timeout)
        return Job.from_proto(response.job)

    async def submit_many(self, items: Iterable[Submission], *, timeout: float | None = None) -> list[Job]:
        """Client.submit_many."""
        request = jobs_pb2.SubmitJobsRequest(jobs=submissions(items))
        response: jobs_pb2.SubmitJobsResponse = await self._idempotent(self._stub.SubmitJobs, request, timeout)
        return [Job.from_proto(item.job) for item in response.results]

    async def get(self, job_id: str, *, timeout: float | None = None) -> Job:
        request = jobs_pb2.GetJobRequest(job_id=job_id)
        job: jobs_pb2.Job = await self._idempotent(self._stub.GetJob, request, timeout)
        return Job.from_proto(job)

    async def result(self, job_id: str, *, wait: bool = False, timeout: float | None = None) -> bytes:
        """Client.result."""
        if wait:
            last = None
            async for job in self.watch(job_id, timeout=timeout):
                last = job
            if last is not None:
                _settled_or_raise(last)
        request = jobs_pb2.GetJobResultRequest(job_id=job_id)
        result: jobs_pb2.JobResult = await self._idempotent(self._stub.GetJobResult, request, None)
        return result.payload

    async def watch(
        self, job_id: str, *, after_sequence: int = 0, include_progress: bool = False, timeout: float | None = None
    ) -> AsyncIterator[Job]:
        """Client.watch."""
        deadline, last, resuming = _Deadline(timeout), after_sequence, _Resuming()
        while True:
            request = jobs_pb2.WatchJobRequest(job_id=job_id, after_sequence=last, include_progress=include_progress)
            stream = self._stub.WatchJob(request, timeout=deadline.remaining(), metadata=self._metadata)
            try:
                async for message in stream:
                    resuming.reset()
                    job = Job.from_proto(message)
                    last = max(last, job.sequence)
                    yield job
                    if job.state.is_settled:
                        return
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                pause = resuming.pause(exc.code(), deadline)
                if pause is None:
                    raise error from None
                await asyncio.sleep(pause)
            finally:
                stream.cancel()

    async def cancel(self, job_id: str, reason: str = "", *, timeout: float | None = None) -> Job:
        """Client.cancel."""
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        job: jobs_pb2.Job = await self._once(self._stub.CancelJob, request, timeout)
        return Job.from_proto(job)

    async def retry(
        self,
        job_id: str,
        reason: str,
        *,
        accept_duplicate_risk: bool = False,
        clear_checkpoints: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Client.retry."""
        request = jobs_pb2.RetryJobRequest(
            job_id=job_id,
            reason=reason,
            accept_duplicate_risk=accept_duplicate_risk,
            clear_checkpoints=clear_checkpoints,
        )
        job: jobs_pb2.Job = await self._once(self._stub.RetryJob, request, timeout)
        return Job.from_proto(job)

    async def events(self, job_id: str, *, timeout: float | None = None) -> list[jobs_pb2.JobEvent]:
        """Client.events."""
        events: list[jobs_pb2.JobEvent] = []
        token = ""
        while True:
            request = jobs_pb2.ListJobEventsRequest(job_id=job_id, page_token=token)
            page: jobs_pb2.ListJobEventsResponse = await self._idempotent(self._stub.ListJobEvents, request, timeout)
            events.extend(page.events)
            if not page.next_page_token:
                return events
            token = page.next_page_token

    async def logs(self, job_id: str, *, attempt: int = 0, timeout: float | None = None) -> list[JobLogLine]:
        """Client.logs."""
        lines: list[JobLogLine] = []
        token = ""
        while True:
            request = jobs_pb2.ListJobLogsRequest(job_id=job_id, attempt=attempt, page_token=token)
            page: jobs_pb2.ListJobLogsResponse = await self._idempotent(self._stub.ListJobLogs, request, timeout)
            lines.extend(JobLogLine.from_proto(line) for line in page.lines)
            if not page.next_page_token:
                return lines
            token = page.next_page_token

    async def _once(self, method: Callable[..., Any], request: object, timeout: float | None) -> Any:
        try:
            return await method(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def _idempotent(self, method: Callable[..., Any], request: object, timeout: float | None) -> Any:
        deadline = _Deadline(timeout or self._timeout)
        while True:
            try:
                return await method(request, timeout=deadline.try_timeout(), metadata=self._metadata)
            except grpc.RpcError as exc:
                pause = deadline.next_pause() if exc.code() in INDETERMINATE_CODES else None
                if pause is None:
                    raise from_rpc_error(exc) from None
            await asyncio.sleep(pause)
