"""The command line: parser, and the requests built from what was parsed (no network here)."""

from __future__ import annotations

import argparse
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import BinaryIO, TypeAlias

from google.protobuf import timestamp_pb2

from jobs.v1 import jobs_pb2
from jobsctl.rendering import parse_state, state_choices

# argparse's own type for what add_subparsers() returns (a string: private classes are not generic at
# run time).
_SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

TARGET_DEFAULT = "127.0.0.1:50051"
TIMEOUT_SECONDS_DEFAULT = 30.0
STDIN_MARKER = "-"
TIME_EXAMPLE = "2030-01-31T09:00:00Z"
_SPAN_PATTERN = re.compile(r"\+?(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")
# The API takes at most 1000 jobs per SubmitJobs call, and at least 4 MiB per message (more when its
# payload limit is raised); a chunk stays under both, with room for the envelope.
CHUNK_SIZE_DEFAULT = 100
CHUNK_SIZE_MAX = 1000
CHUNK_BYTES_MAX = 3 * 1024 * 1024
POLICY_CHOICES = ["fail_set", "wait_for_manual_retry"]


class UsageError(Exception):
    """Arguments that parse but make no valid request; exit code 2, like argparse's own errors."""


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="jobsctl",
        description="Submit and inspect jobs of the durable job service (jobs.v1.JobService). "
        "The global options may also follow the command: `jobsctl result --wait --timeout 20 JOB_ID`.",
        epilog="Exit codes: 0 ok (for watch and result --wait: the job SUCCEEDED), 2 usage or invalid argument, "
        "3 not found (a malformed job id too: no job has it), 4 failed precondition, "
        "5 unavailable or deadline exceeded, 6 the job FAILED, "
        "7 the job was CANCELLED or SUPERSEDED, 8 the job's outcome is unknown (a person decides), "
        "1 anything else.",
    )
    _add_global_options(parser, env, with_defaults=True)
    # The same options on every command, defaulting to "not given" so that they override the values
    # before the command only when they are written after it.
    after_command = argparse.ArgumentParser(add_help=False)
    _add_global_options(after_command, env, with_defaults=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = functools.partial(commands.add_parser, parents=[after_command])
    _add_submit(command)
    _add_submit_batch(command)
    get = command("get", help="show a job's current state")
    get.add_argument("job_id", metavar="JOB_ID")
    result = command("result", help="write a succeeded job's result payload to stdout")
    result.add_argument("job_id", metavar="JOB_ID")
    result.add_argument(
        "--wait", action="store_true", help="first wait for the job to settle: until it does, or for --timeout seconds"
    )
    latest = command(
        "latest",
        help="write the result of a resource key's latest version to stdout",
        description="GetLatestResult: the result of the highest version submitted for RESOURCE_KEY, only once "
        "that version SUCCEEDED (exit 4 while it has not); never an older version's result.",
    )
    latest.add_argument("resource_key", metavar="RESOURCE_KEY")
    _add_list(command)
    _add_lifecycle(command)
    _add_resources_and_sets(command, after_command)
    _add_schedules(command, after_command)
    # Imported here: admin_arguments builds on this module's parsers of times and labels.
    from jobsctl.admin_arguments import add_admin_commands

    add_admin_commands(command, [after_command])
    command(
        "dev",
        help="run the local stack (what `make run` runs): the API and two workers on loopback",
        description="Starts what `make run` starts, in the foreground: PostgreSQL from DATABASE_URL or an "
        "embedded one, the migrations, the API on 127.0.0.1:50051 and two workers. Needs a source checkout.",
    )
    return parser


def _add_global_options(parser: argparse.ArgumentParser, env: Mapping[str, str], *, with_defaults: bool) -> None:
    def default(value: object) -> object:
        return value if with_defaults else argparse.SUPPRESS

    target = env.get("JOBS_API_TARGET") or TARGET_DEFAULT
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--target", default=default(target), help=f"API address host:port (env JOBS_API_TARGET, now {target})"
    )
    group.add_argument(
        "--token",
        default=default(env.get("JOBS_TOKEN")),
        help="bearer token: a tenant's, or an operator's for limits, kinds, tenants and admin (env JOBS_TOKEN)",
    )
    group.add_argument(
        "--tls-ca",
        default=default(env.get("JOBS_TLS_CA_FILE") or None),
        metavar="PATH",
        help="CA certificate (PEM) to verify the API with; turns TLS on (env JOBS_TLS_CA_FILE)",
    )
    group.add_argument(
        "--tls-cert",
        default=default(env.get("JOBS_TLS_CLIENT_CERT_FILE") or None),
        metavar="PATH",
        help="client certificate (PEM) for mutual TLS (env JOBS_TLS_CLIENT_CERT_FILE)",
    )
    group.add_argument(
        "--tls-key",
        default=default(env.get("JOBS_TLS_CLIENT_KEY_FILE") or None),
        metavar="PATH",
        help="client private key (PEM) for mutual TLS (env JOBS_TLS_CLIENT_KEY_FILE)",
    )
    group.add_argument("--output", "-o", choices=["text", "json"], default=default("text"), help="default text")
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=default(None),
        metavar="SECONDS",
        help=f"seconds per call (default {TIMEOUT_SECONDS_DEFAULT:g}); for result --wait, how long to wait "
        "(default: until the job settles)",
    )


def _add_lifecycle(command: Callable[..., argparse.ArgumentParser]) -> None:
    watch = command(
        "watch",
        help="follow a job's transitions live until it settles; the exit code says how it ended",
        description="Prints each transition as it happens (with a live status line on a terminal) and exits "
        "when the job settles: 0 SUCCEEDED, 6 FAILED, 7 CANCELLED or SUPERSEDED, 8 OUTCOME_UNKNOWN. "
        "A broken stream is resumed from the last sequence seen.",
    )
    watch.add_argument("job_id", metavar="JOB_ID")
    watch.add_argument(
        "--after-sequence", type=int, default=0, metavar="N", help="only transitions after this sequence"
    )
    watch.add_argument(
        "--max-wait", type=_positive_float, default=None, metavar="SECONDS", help="give up after this long (exit 5)"
    )
    cancel = command(
        "cancel",
        help="cancel a job: at once if it waits; a running one stops within moments (its worker is notified)",
        description="A PENDING, BLOCKED or RETRY_WAIT job is CANCELLED at once. For a RUNNING job a cancel is "
        "requested: the database notifies its worker, which stops the handler within milliseconds (should the "
        "notification be lost, at its next heartbeat, a third of the lease), and a late result is refused.",
    )
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.add_argument("--reason", default="", help="recorded in the job's history")
    retry = command("retry", help="run a FAILED, CANCELLED or OUTCOME_UNKNOWN job again, recorded with who and why")
    retry.add_argument("job_id", metavar="JOB_ID")
    retry.add_argument("--reason", default="", help="recorded in the job's history")
    retry.add_argument(
        "--accept-duplicate-risk",
        action="store_true",
        help="required for OUTCOME_UNKNOWN: the earlier attempt's effect may already have happened",
    )
    retry.add_argument(
        "--clear-checkpoints",
        action="store_true",
        help="run every stage again (by default the retry resumes after the stages already checkpointed)",
    )
    events = command("events", help="a job's recorded transitions, oldest first (every page)")
    events.add_argument("job_id", metavar="JOB_ID")
    logs = command("logs", help="what a job's handlers logged (ctx.log, logging records), attempt by attempt")
    logs.add_argument("job_id", metavar="JOB_ID")
    logs.add_argument("--attempt", type=int, default=0, help="only this attempt's lines (default: every attempt's)")


def _add_resources_and_sets(
    command: Callable[..., argparse.ArgumentParser], after_command: argparse.ArgumentParser
) -> None:
    resources = command("resources", help="delete a resource key (its jobs, results and versions so far)")
    actions = resources.add_subparsers(dest="resources_command", required=True, metavar="ACTION")
    delete = actions.add_parser(
        "delete",
        parents=[after_command],
        help="delete every version submitted so far of RESOURCE_KEY",
        description="DeleteResource: cancels the key's unfinished jobs (running ones stop as for a cancel, and "
        "their results are refused), removes its results, and refuses later submissions of the deleted "
        "versions. A higher version may be submitted later and brings the key back.",
    )
    delete.add_argument("resource_key", metavar="RESOURCE_KEY")
    delete.add_argument("--reason", required=True, help="recorded with your name")
    sets = command("sets", help="delivery sets: the jobs that together make one version of a resource")
    set_actions = sets.add_subparsers(dest="sets_command", required=True, metavar="ACTION")
    submit = set_actions.add_parser(
        "submit",
        parents=[after_command],
        help="submit the jobs of one version as one set; prints the set",
        description="Each --member is NAME=KIND:PAYLOAD (payload as UTF-8 text, may be empty). A higher "
        "VERSION supersedes the whole older set.",
    )
    submit.add_argument("resource_key", metavar="RESOURCE_KEY")
    submit.add_argument("resource_version", metavar="VERSION", type=int)
    submit.add_argument("--member", action="append", required=True, metavar="NAME=KIND:PAYLOAD")
    submit.add_argument(
        "--fan-in", metavar="KIND:PAYLOAD", help="a job that runs once every member succeeded and reads their results"
    )
    submit.add_argument("--policy", choices=POLICY_CHOICES, default="fail_set", help="when a member fails")
    show = set_actions.add_parser("show", parents=[after_command], help="a set as it stands, whatever its state")
    show.add_argument("resource_key", metavar="RESOURCE_KEY")
    show.add_argument("--version", type=int, default=0, metavar="V", help="default: the highest version a set has")
    latest = set_actions.add_parser(
        "latest",
        parents=[after_command],
        help="the set of the key's latest version with its results, only once complete (exit 4 until then)",
    )
    latest.add_argument("resource_key", metavar="RESOURCE_KEY")


def _add_schedules(command: Callable[..., argparse.ArgumentParser], after_command: argparse.ArgumentParser) -> None:
    schedules = command(
        "schedules",
        help="recurring submissions: create, get, list, pause, resume, trigger, delete",
        description="A schedule submits its job at the times of a cron expression in a time zone, one job per "
        'fire time however many API replicas run (docs/LIFECYCLE.md, "Schedules").',
    )
    subparsers = schedules.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    actions = _ScheduleActions(subparsers, after_command)
    create = actions.add_parser("create", help="create a schedule; prints it")
    create.add_argument("schedule_id", metavar="SCHEDULE_ID", help="your name for it, e.g. nightly-report")
    create.add_argument(
        "--cron",
        required=True,
        help="5 fields, or 6 with SECONDS LAST (not first, as in Quartz): '0 3 * * *'; '0 3 * * * 30' is 03:00:30",
    )
    create.add_argument("--time-zone", default="UTC", metavar="ZONE", help="IANA zone, e.g. Europe/Berlin")
    create.add_argument("--kind", required=True, metavar="KIND", help="the job kind each fire submits")
    payload = create.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="TEXT", help="payload as UTF-8 text; '-' reads stdin")
    payload.add_argument("--payload-file", metavar="PATH", help="payload from a file; '-' reads stdin")
    create.add_argument("--priority", type=int, default=0, metavar="N")
    create.add_argument("--max-attempts", type=int, default=0, metavar="N", help="0 means the kind's default")
    create.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable")
    create.add_argument(
        "--overlap",
        choices=["skip", "buffer-one", "allow"],
        default="skip",
        help="while the previous fire's job has not ended (default skip)",
    )
    create.add_argument(
        "--catch-up-window",
        type=int,
        default=0,
        metavar="SECONDS",
        help="after downtime, fires older than this are missed, never run (default 60)",
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--note", default="")
    actions.add_parser("list", help="the tenant's schedules")
    for name, text in (
        ("get", "show a schedule"),
        ("trigger", "submit its job now (paused or not); prints the job id"),
        ("delete", "delete it; the jobs it submitted stay"),
    ):
        actions.add_parser(name, help=text).add_argument("schedule_id", metavar="SCHEDULE_ID")
    for name, text in (("pause", "stop its cron fires"), ("resume", "fire again from the next cron time")):
        action = actions.add_parser(name, help=text)
        action.add_argument("schedule_id", metavar="SCHEDULE_ID")
        action.add_argument("--note", default="", help="kept with the schedule")


class _ScheduleActions:
    """The schedules' actions, each taking the global options after it too."""

    def __init__(self, subparsers: _SubParsers, after_command: argparse.ArgumentParser) -> None:
        self._subparsers = subparsers
        self._after_command = after_command

    def add_parser(self, name: str, *, help: str) -> argparse.ArgumentParser:
        return self._subparsers.add_parser(name, help=help, parents=[self._after_command])


def _add_submit(command: Callable[..., argparse.ArgumentParser]) -> None:
    submit = command(
        "submit",
        help="submit a job; prints its id",
        description=f"Times (--run-after, --deadline) are RFC 3339 with an offset ({TIME_EXAMPLE}) or a "
        "span from now (90s, 10m, 2h, 1d, 1h30m).",
    )
    submit.add_argument("kind", metavar="KIND", help="registered job kind, e.g. echo, sleep, flaky, summarize")
    payload = submit.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="TEXT", help="payload as UTF-8 text; '-' reads stdin")
    payload.add_argument("--payload-file", metavar="PATH", help="payload from a file; '-' reads stdin")
    submit.add_argument("--idempotency-key", metavar="K", default="")
    submit.add_argument("--priority", type=int, default=0, metavar="N", help="higher runs first; -1000 to 1000")
    submit.add_argument("--max-attempts", type=int, default=0, metavar="N", help="0 means the kind's default")
    submit.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable")
    submit.add_argument("--resource-key", metavar="K", default="", help="with --resource-version")
    submit.add_argument(
        "--resource-version", type=int, metavar="V", default=0, help="1 or more; a higher one supersedes"
    )
    submit.add_argument("--run-after", type=parse_time, metavar="TIME", help="not before this time")
    submit.add_argument(
        "--deadline", type=parse_time, metavar="TIME", help="no attempt starts after it (the job then ends FAILED)"
    )
    submit.add_argument(
        "--depends-on",
        action="append",
        default=[],
        metavar="JOB_ID",
        help="repeatable; the job waits BLOCKED until each of these has SUCCEEDED",
    )
    submit.add_argument(
        "--dedupe-by-input",
        action="store_true",
        help="attach to an identical job (same kind, payload and resource) instead of running again; "
        "not with --idempotency-key",
    )
    submit.add_argument(
        "--sequence-key",
        metavar="K",
        default="",
        help="run one at a time, in the order submitted, with your other jobs of this key; a FAILED one halts "
        "the rest until it is retried or cancelled",
    )
    submit.add_argument(
        "--singleton-key",
        metavar="K",
        default="",
        help="while a job with this key is pending, blocked, retry-waiting or running, answer that job instead",
    )
    submit.add_argument(
        "--debounce",
        metavar="K",
        default="",
        help="collapse submissions with this key into one job that runs with the latest payload once the key "
        "was quiet for --quiet-seconds, or --max-wait-seconds after the first at the latest",
    )
    submit.add_argument("--quiet-seconds", type=float, metavar="S", default=0.0, help="with --debounce")
    submit.add_argument("--max-wait-seconds", type=float, metavar="S", default=0.0, help="with --debounce")


def _add_submit_batch(command: Callable[..., argparse.ArgumentParser]) -> None:
    batch = command(
        "submit-batch",
        help="submit every job of a JSON-lines file; prints their ids in file order",
        description="Each line is one SubmitJobRequest in the proto JSON form, as grpcurl takes it (payload in "
        'base64): {"kind": "echo", "payload": "aGk=", "idempotency_key": "order-7"}. Blank lines are skipped. '
        "The whole file is read and checked first; then the lines go in chunks, one SubmitJobs call each, "
        "all or nothing per chunk. On a failure the ids of the chunks before it are already printed. "
        "Lines with an idempotency_key make running the same file again safe.",
    )
    batch.add_argument("path", metavar="PATH", help="the JSON-lines file; '-' reads stdin")
    batch.add_argument(
        "--chunk-size",
        type=_chunk_size,
        default=CHUNK_SIZE_DEFAULT,
        metavar="N",
        help=f"jobs per SubmitJobs call, 1 to {CHUNK_SIZE_MAX} (default {CHUNK_SIZE_DEFAULT}); a chunk also "
        f"stays under {CHUNK_BYTES_MAX // (1024 * 1024)} MiB",
    )


def _add_list(command: Callable[..., argparse.ArgumentParser]) -> None:
    listing = command("list", help="list jobs, newest first (with --sequence, in the sequence's order)")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="S",
        help=f"repeatable; one of {', '.join(s.lower() for s in state_choices())}",
    )
    listing.add_argument("--kind", default="")
    listing.add_argument("--resource-key", default="", metavar="K")
    listing.add_argument(
        "--parent", default="", metavar="JOB_ID", help="only the jobs this job's handler spawned (its children)"
    )
    listing.add_argument(
        "--sequence",
        default="",
        metavar="KEY",
        help="only the jobs still holding this sequence (--sequence-key), its head first, in the order they run",
    )
    listing.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable; all must match")
    listing.add_argument("--page-size", type=int, default=0, metavar="N", help="1 to 500 (server default 50)")
    listing.add_argument("--page-token", default="", metavar="T")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def _chunk_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= CHUNK_SIZE_MAX:
        raise argparse.ArgumentTypeError(f"must be between 1 and {CHUNK_SIZE_MAX}")
    return value


def parse_time(text: str) -> datetime | timedelta:
    """An absolute time (RFC 3339, with its offset), or a span to add to the moment the request is built."""
    span = _SPAN_PATTERN.fullmatch(text.strip())
    if span and any(span.groups()):
        days, hours, minutes, seconds = (float(part or 0) for part in span.groups())
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r}; give RFC 3339 ({TIME_EXAMPLE}) or a span from now (90s, 10m, 2h, 1d)"
        ) from None
    if moment.tzinfo is None:
        # A time without an offset means a different instant on every machine that reads it.
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset; add Z or +HH:MM, e.g. {TIME_EXAMPLE}")
    return moment


def _timestamp(when: datetime | timedelta | None, now: datetime) -> timestamp_pb2.Timestamp | None:
    if when is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(now + when if isinstance(when, timedelta) else when)
    return stamp


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label wants KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


def read_payload(args: argparse.Namespace, stdin: BinaryIO) -> bytes:
    if args.payload_file is not None:
        if args.payload_file == STDIN_MARKER:
            return stdin.read()
        try:
            with open(args.payload_file, "rb") as source:
                return source.read()
        except OSError as exc:
            raise UsageError(f"cannot read --payload-file: {exc.strerror}: {args.payload_file}") from None
    if args.payload == STDIN_MARKER:
        return stdin.read()
    return (args.payload or "").encode("utf-8")


def submit_request(args: argparse.Namespace, stdin: BinaryIO, now: datetime | None = None) -> jobs_pb2.SubmitJobRequest:
    """Checks only what the CLI can know better than the server: pairs of flags and their syntax.
    Spans (--run-after 10m) count from `now`, the same instant for both times."""
    if bool(args.resource_key) != bool(args.resource_version):
        raise UsageError("--resource-key and --resource-version go together")
    if bool(args.debounce) != bool(args.quiet_seconds and args.max_wait_seconds):
        raise UsageError("--debounce, --quiet-seconds and --max-wait-seconds go together")
    now = now or datetime.now(UTC)
    debounce = (
        jobs_pb2.Debounce(key=args.debounce, quiet_seconds=args.quiet_seconds, max_wait_seconds=args.max_wait_seconds)
        if args.debounce
        else None
    )
    return jobs_pb2.SubmitJobRequest(
        kind=args.kind,
        payload=read_payload(args, stdin),
        idempotency_key=args.idempotency_key,
        priority=args.priority,
        run_after=_timestamp(args.run_after, now),
        max_attempts=args.max_attempts,
        deadline=_timestamp(args.deadline, now),
        labels=parse_labels(args.label),
        resource_key=args.resource_key,
        resource_version=args.resource_version,
        depends_on=args.depends_on,
        dedupe_by_input=args.dedupe_by_input,
        sequence_key=args.sequence_key,
        singleton_key=args.singleton_key,
        debounce=debounce,
    )


def list_request(args: argparse.Namespace) -> jobs_pb2.ListJobsRequest:
    states = []
    for text in args.state:
        try:
            states.append(parse_state(text))
        except ValueError:
            raise UsageError(f"unknown state {text!r}; one of {', '.join(state_choices())}") from None
    return jobs_pb2.ListJobsRequest(
        states=states,
        kind=args.kind,
        resource_key=args.resource_key,
        parent_job_id=args.parent,
        sequence_key=args.sequence,
        labels=parse_labels(args.label),
        page_size=args.page_size,
        page_token=args.page_token,
    )
