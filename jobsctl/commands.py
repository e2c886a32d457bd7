"""The subcommands: one JobService call each (two for `result --wait`), printed as text or json."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import BinaryIO, TextIO

import grpc

from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from jobsctl.arguments import list_request, submit_request
from jobsctl.rendering import job_text, jobs_table, message_json, state_name

POLL_INTERVAL_SECONDS = 0.2

# A job in OUTCOME_UNKNOWN waits for a person, so waiting for a result stops there too.
_SETTLED_STATES = frozenset(
    {
        jobs_pb2.JOB_STATE_SUCCEEDED,
        jobs_pb2.JOB_STATE_FAILED,
        jobs_pb2.JOB_STATE_CANCELLED,
        jobs_pb2.JOB_STATE_SUPERSEDED,
        jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN,
    }
)


class WaitTimedOut(Exception):
    """`result --wait` gave up; exits like DEADLINE_EXCEEDED."""


@dataclass(frozen=True)
class Console:
    stdin: BinaryIO
    stdout: TextIO
    stdout_bytes: BinaryIO
    stderr: TextIO


@dataclass(frozen=True)
class Call:
    """What every RPC carries: the caller's credential and a deadline."""

    stub: jobs_pb2_grpc.JobServiceStub
    token: str
    timeout: float

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


def run_submit(call: Call, args: argparse.Namespace, console: Console) -> None:
    request = submit_request(args, console.stdin)
    response = call.stub.SubmitJob(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(response), file=console.stdout)
        return
    print(response.job.job_id, file=console.stdout)
    how = "submitted" if response.created else "already submitted earlier (same idempotency key or input)"
    print(f"{how}; state {state_name(response.job.state)}", file=console.stderr)


def run_get(call: Call, args: argparse.Namespace, console: Console) -> None:
    job = call.stub.GetJob(jobs_pb2.GetJobRequest(job_id=args.job_id), timeout=call.timeout, metadata=call.metadata)
    print(message_json(job) if args.output == "json" else job_text(job), file=console.stdout)


def run_result(call: Call, args: argparse.Namespace, console: Console) -> None:
    if args.wait:
        _wait_until_settled(call, args.job_id)
    result = call.stub.GetJobResult(
        jobs_pb2.GetJobResultRequest(job_id=args.job_id), timeout=call.timeout, metadata=call.metadata
    )
    if args.output == "json":
        print(message_json(result), file=console.stdout)
        return
    console.stdout.flush()
    console.stdout_bytes.write(result.payload)
    console.stdout_bytes.flush()


def _wait_until_settled(call: Call, job_id: str) -> None:
    """Follows WatchJob until the job settles; the stream's deadline bounds the wait."""
    stream = call.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), timeout=call.timeout, metadata=call.metadata)
    try:
        for job in stream:
            if job.state in _SETTLED_STATES:
                return
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        _poll_until_settled(call, job_id)
    finally:
        stream.cancel()


def _poll_until_settled(call: Call, job_id: str) -> None:
    """For an API that does not serve WatchJob: GetJob until settled, within the same deadline."""
    deadline = time.monotonic() + call.timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimedOut(f"job {job_id} did not finish within {call.timeout:g}s")
        job = call.stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=remaining, metadata=call.metadata)
        if job.state in _SETTLED_STATES:
            return
        time.sleep(min(POLL_INTERVAL_SECONDS, max(remaining, 0)))


def run_list(call: Call, args: argparse.Namespace, console: Console) -> None:
    response = call.stub.ListJobs(list_request(args), timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(response), file=console.stdout)
        return
    print(jobs_table(list(response.jobs)), file=console.stdout)
    if response.next_page_token:
        print(f"more: --page-token {response.next_page_token}", file=console.stderr)


COMMANDS = {"submit": run_submit, "get": run_get, "result": run_result, "list": run_list}
