"""`jobsctl resources …` and `jobsctl sets …`: deleting a resource key, and delivery sets (the jobs that together
make one version of a resource). Their arguments are parsed in arguments.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from jobs.v1 import jobs_pb2
from jobsctl.arguments import UsageError
from jobsctl.commands import Call, Console
from jobsctl.rendering import message_json, state_name, table, timestamp_text
from jobsctl.rpc_errors import EXIT_OK

RESULT_PREVIEW_CHARS = 40
POLICIES = {
    "fail_set": jobs_pb2.DELIVERY_SET_FAILURE_POLICY_FAIL_SET,
    "wait_for_manual_retry": jobs_pb2.DELIVERY_SET_FAILURE_POLICY_WAIT_FOR_MANUAL_RETRY,
}


def _job(spec: str, what: str) -> jobs_pb2.SubmitJobRequest:
    kind, _, payload = spec.partition(":")
    if not kind:
        raise UsageError(f"{what} needs KIND:PAYLOAD, got {spec!r}")
    return jobs_pb2.SubmitJobRequest(kind=kind, payload=payload.encode())


def _members(specs: list[str]) -> list[jobs_pb2.DeliverySetMember]:
    members = []
    for spec in specs:
        name, sep, job = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--member needs NAME=KIND:PAYLOAD, got {spec!r}")
        members.append(jobs_pb2.DeliverySetMember(name=name, job=_job(job, "--member")))
    return members


def run_resources(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.DeleteResourceRequest(resource_key=args.resource_key, reason=args.reason)
    deleted = call.stub.DeleteResource(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(deleted), file=console.stdout)
        return EXIT_OK
    print(
        f"{deleted.resource_key} deleted up to version {deleted.deleted_version}: {deleted.cancelled_jobs} jobs "
        f"cancelled, {deleted.deleted_results} results removed",
        file=console.stdout,
    )
    return EXIT_OK


def run_sets(call: Call, args: argparse.Namespace, console: Console) -> int:
    options = {"timeout": call.timeout, "metadata": call.metadata}
    if args.sets_command == "submit":
        request = jobs_pb2.SubmitDeliverySetRequest(
            resource_key=args.resource_key,
            resource_version=args.resource_version,
            members=_members(args.member),
            fan_in=_job(args.fan_in, "--fan-in") if args.fan_in else None,
            failure_policy=POLICIES[args.policy],
        )
        response = call.stub.SubmitDeliverySet(request, **options)
        found = _whole_set(
            response.set,
            lambda token: call.stub.GetDeliverySet(
                jobs_pb2.GetDeliverySetRequest(
                    resource_key=args.resource_key, resource_version=args.resource_version, page_token=token
                ),
                **options,
            ),
        )
        if args.output == "text" and not response.created:
            print("already submitted earlier (same key, version and members)", file=console.stderr)
    elif args.sets_command == "show":

        def show(token: str) -> jobs_pb2.DeliverySet:
            request_show = jobs_pb2.GetDeliverySetRequest(
                resource_key=args.resource_key, resource_version=args.version, page_token=token
            )
            shown: jobs_pb2.DeliverySet = call.stub.GetDeliverySet(request_show, **options)
            return shown

        found = _whole_set(show(""), show)
    else:

        def latest(token: str) -> jobs_pb2.DeliverySet:
            request_latest = jobs_pb2.GetLatestDeliverySetRequest(resource_key=args.resource_key, page_token=token)
            latest_set: jobs_pb2.DeliverySet = call.stub.GetLatestDeliverySet(request_latest, **options)
            return latest_set

        found = _whole_set(latest(""), latest)
    print(message_json(found) if args.output == "json" else set_text(found), file=console.stdout)
    return EXIT_OK


def _whole_set(first: jobs_pb2.DeliverySet, page: Callable[[str], jobs_pb2.DeliverySet]) -> jobs_pb2.DeliverySet:
    """Every page of a set in one message: a set's members and results may not fit one answer."""
    token = first.next_page_token
    while token:
        following = page(token)
        first.members.extend(following.members)
        for name in ("fan_in", "fan_in_result"):
            if following.HasField(name):
                getattr(first, name).CopyFrom(getattr(following, name))
        token = following.next_page_token
    first.next_page_token = ""
    return first


def set_text(found: jobs_pb2.DeliverySet) -> str:
    """A header line, then one row per member (and the fan-in) with its state and, when complete, its result."""
    state = jobs_pb2.DeliverySetState.Name(found.state).removeprefix("DELIVERY_SET_STATE_")
    policy = jobs_pb2.DeliverySetFailurePolicy.Name(found.failure_policy).removeprefix("DELIVERY_SET_FAILURE_POLICY_")
    header = (
        f"set {found.set_id}  {found.resource_key} version {found.resource_version}  {state}  "
        f"policy {policy.lower()}  created {timestamp_text(found, 'created_at')}"
    )
    rows: list[tuple[str, ...]] = [("MEMBER", "JOB_ID", "KIND", "STATE", "RESULT")]
    for member in found.members:
        rows.append(_row(member.name, member.job, member.result if member.HasField("result") else None))
    if found.HasField("fan_in"):
        rows.append(_row("(fan-in)", found.fan_in, found.fan_in_result if found.HasField("fan_in_result") else None))
    return header + "\n" + table(rows)


def _row(name: str, job: jobs_pb2.Job, result: jobs_pb2.JobResult | None) -> tuple[str, ...]:
    preview = ""
    if result is not None:
        text = result.payload.decode("utf-8", errors="replace")
        preview = text if len(text) <= RESULT_PREVIEW_CHARS else text[: RESULT_PREVIEW_CHARS - 1] + "…"
    return (name, job.job_id, job.kind, state_name(job.state), preview)
