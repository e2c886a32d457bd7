"""The subcommands that make one JobService call (or a few): printed as text or json. Each returns the
process exit code; `watch` lives in watch.py."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO, cast

from durable_jobs import Client
from jobs.v1 import admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from jobsctl.arguments import list_request, submit_request
from jobsctl.rendering import events_table, job_text, jobs_table, log_line_proto, log_text, message_json, state_name
from jobsctl.rpc_errors import EXIT_OK
from jobsctl.schedules import run_schedules
from jobsctl.submit_batch import run_submit_batch
from jobsctl.watch import EXIT_BY_SETTLED_STATE, follow, run_watch


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
    # For the operators' commands; the same channel.
    admin: admin_pb2_grpc.AdminServiceStub | None = None
    # The SDK's client, over the same channel: the commands that need no more than it offers use it.
    client: Client | None = None

    @property
    def jobs(self) -> Client:
        if self.client is None:
            raise RuntimeError("this command needs the SDK's client")
        return self.client

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments of every call: deadline and credential."""
        return {"timeout": self.timeout, "metadata": self.metadata}


def run_submit(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = submit_request(args, console.stdin)
    response = call.stub.SubmitJob(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(response), file=console.stdout)
        return EXIT_OK
    print(response.job.job_id, file=console.stdout)
    how = "submitted" if response.created else "already submitted earlier (same idempotency key or input)"
    print(f"{how}; state {state_name(response.job.state)}", file=console.stderr)
    return EXIT_OK


def run_get(call: Call, args: argparse.Namespace, console: Console) -> int:
    job = call.stub.GetJob(jobs_pb2.GetJobRequest(job_id=args.job_id), timeout=call.timeout, metadata=call.metadata)
    print(message_json(job) if args.output == "json" else job_text(job), file=console.stdout)
    return EXIT_OK


def run_result(call: Call, args: argparse.Namespace, console: Console) -> int:
    """With --wait, a job that settles without succeeding exits with its outcome's code, no result.
    The wait is bounded only by a --timeout the user gave: the per-call default would cut it short."""
    if args.wait:
        states = list(follow(call.jobs, args.job_id, max_wait=args.timeout))
        settled = states[-1] if states else None
        if settled is not None and settled.state != jobs_pb2.JOB_STATE_SUCCEEDED:
            print(f"jobsctl: job {args.job_id} ended {state_name(settled.state)}", file=console.stderr)
            return EXIT_BY_SETTLED_STATE[settled.state]
    result = call.stub.GetJobResult(
        jobs_pb2.GetJobResultRequest(job_id=args.job_id), timeout=call.timeout, metadata=call.metadata
    )
    if args.output == "json":
        print(message_json(result), file=console.stdout)
        return EXIT_OK
    console.stdout.flush()
    console.stdout_bytes.write(result.payload)
    console.stdout_bytes.flush()
    return EXIT_OK


def run_latest(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.GetLatestResultRequest(resource_key=args.resource_key)
    latest = call.stub.GetLatestResult(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(latest), file=console.stdout)
        return EXIT_OK
    print(f"{latest.resource_key} version {latest.resource_version}: job {latest.job.job_id}", file=console.stderr)
    console.stdout.flush()
    console.stdout_bytes.write(latest.result.payload)
    console.stdout_bytes.flush()
    return EXIT_OK


def run_list(call: Call, args: argparse.Namespace, console: Console) -> int:
    response = call.stub.ListJobs(list_request(args), timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(response), file=console.stdout)
        return EXIT_OK
    print(jobs_table(list(response.jobs)), file=console.stdout)
    if response.next_page_token:
        print(f"more: --page-token {response.next_page_token}", file=console.stderr)
    return EXIT_OK


def run_cancel(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.CancelJobRequest(job_id=args.job_id, reason=args.reason)
    job = call.stub.CancelJob(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(job), file=console.stdout)
    elif job.state == jobs_pb2.JOB_STATE_CANCELLED:
        print(f"{job.job_id} CANCELLED", file=console.stdout)
    else:
        print(
            f"{job.job_id} cancel requested; state {state_name(job.state)} until its worker stops "
            f"(follow it with: jobsctl watch {job.job_id})",
            file=console.stdout,
        )
    return EXIT_OK


def run_retry(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.RetryJobRequest(
        job_id=args.job_id,
        reason=args.reason,
        accept_duplicate_risk=args.accept_duplicate_risk,
        clear_checkpoints=args.clear_checkpoints,
    )
    job = call.stub.RetryJob(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(job), file=console.stdout)
    else:
        print(f"{job.job_id} retried; state {state_name(job.state)}", file=console.stdout)
    return EXIT_OK


def run_events(call: Call, args: argparse.Namespace, console: Console) -> int:
    # The SDK's copy of the stubs makes the very same message classes (one descriptor pool): only the
    # type checker tells the two module paths apart.
    events = cast(list[jobs_pb2.JobEvent], call.jobs.events(args.job_id))
    if args.output == "json":
        print(message_json(jobs_pb2.ListJobEventsResponse(events=events)), file=console.stdout)
    else:
        print(events_table(events), file=console.stdout)
    return EXIT_OK


def run_logs(call: Call, args: argparse.Namespace, console: Console) -> int:
    """What the job's handlers logged (ctx.log and logging records), attempt by attempt."""
    lines = call.jobs.logs(args.job_id, attempt=args.attempt)
    if args.output == "json":
        response = jobs_pb2.ListJobLogsResponse(lines=[log_line_proto(line) for line in lines])
        print(message_json(response), file=console.stdout)
    else:
        print(log_text(lines), file=console.stdout)
    return EXIT_OK


COMMANDS = {
    "submit": run_submit,
    "submit-batch": run_submit_batch,
    "get": run_get,
    "result": run_result,
    "latest": run_latest,
    "list": run_list,
    "watch": run_watch,
    "cancel": run_cancel,
    "retry": run_retry,
    "events": run_events,
    "logs": run_logs,
    "schedules": run_schedules,
}
