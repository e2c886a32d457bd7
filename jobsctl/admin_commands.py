"""The operators' subcommands: one AdminService call each (events: every page), printed as text or json.
Each returns the process exit code."""

from __future__ import annotations

import argparse

from google.protobuf.message import Message

from jobs.v1 import admin_pb2, admin_pb2_grpc, jobs_pb2
from jobsctl.admin_arguments import job_filter
from jobsctl.commands import Call, Console
from jobsctl.rendering import events_table, job_text, message_json, state_name, table, timestamp_text
from jobsctl.rpc_errors import EXIT_OK

EVENTS_PAGE_SIZE = 200
# A bulk action takes about a millisecond per job (benchmarks/admin_bulk.py: 1,300 cancels and 900
# retries per second on 2 cores), so 100,000 jobs need minutes, not the per-call default.
BULK_TIMEOUT_SECONDS_DEFAULT = 900.0
A = admin_pb2


def _admin(call: Call) -> admin_pb2_grpc.AdminServiceStub:
    assert call.admin is not None, "main() builds the AdminService stub"
    return call.admin


def _print(args: argparse.Namespace, console: Console, message: Message, text: str) -> int:
    print(message_json(message) if args.output == "json" else text, file=console.stdout)
    return EXIT_OK


def run_limits(call: Call, args: argparse.Namespace, console: Console) -> int:
    stub, options = _admin(call), call.options
    if args.action == "set":
        request = A.SetLimitRequest(
            key=args.key, max_running=args.max_running, rate_per_second=args.rate, burst=args.burst, reason=args.reason
        )
        limit = stub.SetLimit(request, **options).limit
        return _print(
            args,
            console,
            limit,
            f"{limit.key} max_running={limit.max_running} rate={limit.rate_per_second:g}/s burst={limit.burst}",
        )
    if args.action == "delete":
        response = stub.DeleteLimit(A.DeleteLimitRequest(key=args.key, reason=args.reason), **options)
        return _print(args, console, response, f"{args.key} " + ("deleted" if response.deleted else "had no limit"))
    response = stub.ListLimits(A.ListLimitsRequest(), **options)
    rows = [("KEY", "MAX_RUNNING", "RATE_PER_SECOND", "BURST", "UPDATED_BY", "UPDATED_AT")] + [
        (
            x.key,
            str(x.max_running),
            f"{x.rate_per_second:g}",
            str(x.burst),
            x.updated_by,
            timestamp_text(x, "updated_at"),
        )
        for x in response.limits
    ]
    return _print(args, console, response, table(rows))


def _kind_line(kind: admin_pb2.Kind) -> str:
    paused = f"paused by {kind.paused_by}: {kind.pause_reason}" if kind.paused else "running"
    return f"{kind.kind} {paused}"


def run_kinds(call: Call, args: argparse.Namespace, console: Console) -> int:
    stub, options = _admin(call), call.options
    if args.action == "pause":
        paused = stub.PauseKind(A.PauseKindRequest(kind=args.kind, reason=args.reason), **options)
        return _print(args, console, paused, _kind_line(paused.kind))
    if args.action == "resume":
        resumed = stub.ResumeKind(A.ResumeKindRequest(kind=args.kind, reason=args.reason), **options)
        return _print(args, console, resumed, _kind_line(resumed.kind))
    if args.action == "retire":
        response = stub.RetireKind(A.RetireKindRequest(kind=args.kind, reason=args.reason), **options)
        return _print(args, console, response, f"{response.kind} retired")
    listing = stub.ListKinds(A.ListKindsRequest(include_retired=args.include_retired), **options)
    rows = [("KIND", "PAUSED", "MAX_ATTEMPTS", "LIMIT_KEYS", "PUBLISHERS", "CONFLICT")] + [
        (
            k.kind + (" (retired)" if k.HasField("retired_at") else ""),
            f"yes ({k.paused_by})" if k.paused else "no",
            str(k.max_attempts),
            ",".join(k.limit_keys) or "-",
            ",".join(k.publishers) or "-",
            "yes" if k.policy_conflict else "no",
        )
        for k in listing.kinds
    ]
    return _print(args, console, listing, table(rows))


def run_tenants(call: Call, args: argparse.Namespace, console: Console) -> int:
    stub, options = _admin(call), call.options
    if args.action == "weight":
        request = A.SetTenantWeightRequest(tenant=args.tenant, weight=args.weight, reason=args.reason)
        stored = stub.SetTenantWeight(request, **options).tenant_weight
        return _print(args, console, stored, f"{stored.tenant} weight {stored.weight}")
    response = stub.ListTenantWeights(A.ListTenantWeightsRequest(), **options)
    rows = [("TENANT", "WEIGHT", "UPDATED_BY", "UPDATED_AT")] + [
        (w.tenant, str(w.weight), w.updated_by, timestamp_text(w, "updated_at")) for w in response.tenant_weights
    ]
    return _print(args, console, response, table(rows))


def _bulk_text(response: admin_pb2.CancelJobsResponse | admin_pb2.RetryJobsResponse, verb: str, done: str) -> str:
    if response.dry_run:
        return (
            f"{response.matched_count} jobs match; to {verb} them run again with "
            f"--expected-count {response.matched_count} instead of --dry-run"
        )
    lines = [f"{response.changed_count} of {response.matched_count} jobs {done}; {response.skipped_count} skipped"]
    lines += [f"  skipped {s.job_id} ({s.tenant}): {s.reason}: {s.message}" for s in response.skipped]
    return "\n".join(lines)


def run_admin(call: Call, args: argparse.Namespace, console: Console) -> int:
    stub, options = _admin(call), call.options
    if args.action == "search":
        request = A.SearchJobsRequest(filter=job_filter(args), page_size=args.page_size, page_token=args.page_token)
        page = stub.SearchJobs(request, **options)
        rows = [("TENANT", "JOB_ID", "KIND", "STATE", "ATTEMPTS", "CREATED_AT")] + [
            (
                j.tenant,
                j.job.job_id,
                j.job.kind,
                state_name(j.job.state),
                f"{j.job.attempts}/{j.job.max_attempts}",
                timestamp_text(j.job, "created_at"),
            )
            for j in page.jobs
        ]
        if page.next_page_token and args.output != "json":
            print(f"more: --page-token {page.next_page_token}", file=console.stderr)
        return _print(args, console, page, table(rows))
    if args.action == "get":
        found = stub.GetJob(A.AdminServiceGetJobRequest(job_id=args.job_id), **options).job
        return _print(args, console, found, f"tenant            {found.tenant}\n{job_text(found.job)}")
    if args.action == "events":
        return _events(call, args, console)
    options["timeout"] = args.timeout or BULK_TIMEOUT_SECONDS_DEFAULT
    fields = {
        "filter": job_filter(args),
        "reason": args.reason,
        "dry_run": args.dry_run,
        "expected_count": args.expected_count or 0,
    }
    if args.action == "cancel":
        cancelled = stub.CancelJobs(A.CancelJobsRequest(**fields), **options)
        return _print(args, console, cancelled, _bulk_text(cancelled, "cancel", "cancelled"))
    retry = A.RetryJobsRequest(**fields, accept_duplicate_risk=args.accept_duplicate_risk)
    retried = stub.RetryJobs(retry, **options)
    return _print(args, console, retried, _bulk_text(retried, "retry", "retried"))


def _events(call: Call, args: argparse.Namespace, console: Console) -> int:
    events: list[jobs_pb2.JobEvent] = []
    page_token = ""
    while True:
        request = A.AdminServiceListJobEventsRequest(
            job_id=args.job_id, page_size=EVENTS_PAGE_SIZE, page_token=page_token
        )
        page = _admin(call).ListJobEvents(request, **call.options)
        events += page.events
        page_token = page.next_page_token
        if not page_token:
            break
    return _print(args, console, A.AdminServiceListJobEventsResponse(events=events), events_table(events))


ADMIN_COMMANDS = {"limits": run_limits, "kinds": run_kinds, "tenants": run_tenants, "admin": run_admin}
