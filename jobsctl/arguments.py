"""The command line: parser, and the requests built from what was parsed (no network here)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import BinaryIO, TypeAlias

from jobs.v1 import jobs_pb2
from jobsctl.rendering import parse_state, state_choices

# argparse's own type for what add_subparsers() returns (a string: private classes are not generic at
# run time).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

TARGET_DEFAULT = "127.0.0.1:50051"
TIMEOUT_SECONDS_DEFAULT = 30.0
STDIN_MARKER = "-"


class UsageError(Exception):
    """Arguments that parse but make no valid request; exit code 2, like argparse's own errors."""


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="jobsctl",
        description="Submit and inspect jobs of the durable job service (jobs.v1.JobService).",
        epilog="Exit codes: 0 ok (for watch and result --wait: the job SUCCEEDED), 2 usage or invalid argument, "
        "3 not found, 4 failed precondition, 5 unavailable or deadline exceeded, 6 the job FAILED, "
        "7 the job was CANCELLED or SUPERSEDED, 8 the job's outcome is unknown (a person decides), "
        "1 anything else.",
    )
    parser.add_argument(
        "--target",
        default=env.get("JOBS_API_TARGET") or TARGET_DEFAULT,
        help="API address host:port (env JOBS_API_TARGET, default %(default)s)",
    )
    parser.add_argument("--token", default=env.get("JOBS_TOKEN"), help="tenant bearer token (env JOBS_TOKEN)")
    parser.add_argument(
        "--tls-ca",
        default=env.get("JOBS_TLS_CA_FILE") or None,
        metavar="PATH",
        help="CA certificate (PEM) to verify the API with; turns TLS on (env JOBS_TLS_CA_FILE)",
    )
    parser.add_argument(
        "--tls-cert",
        default=env.get("JOBS_TLS_CLIENT_CERT_FILE") or None,
        metavar="PATH",
        help="client certificate (PEM) for mutual TLS (env JOBS_TLS_CLIENT_CERT_FILE)",
    )
    parser.add_argument(
        "--tls-key",
        default=env.get("JOBS_TLS_CLIENT_KEY_FILE") or None,
        metavar="PATH",
        help="client private key (PEM) for mutual TLS (env JOBS_TLS_CLIENT_KEY_FILE)",
    )
    parser.add_argument("--output", "-o", choices=["text", "json"], default="text", help="default %(default)s")
    parser.add_argument(
        "--timeout", type=_positive_float, default=TIMEOUT_SECONDS_DEFAULT, help="seconds per call (%(default)s)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_submit(commands)
    get = commands.add_parser("get", help="show a job's current state")
    get.add_argument("job_id", metavar="JOB_ID")
    result = commands.add_parser("result", help="write a succeeded job's result payload to stdout")
    result.add_argument("job_id", metavar="JOB_ID")
    result.add_argument("--wait", action="store_true", help="first wait (up to --timeout) for the job to finish")
    _add_list(commands)
    _add_lifecycle(commands)
    commands.add_parser(
        "dev",
        help="run the local stack (what `make run` runs): the API and two workers on loopback",
        description="Starts what `make run` starts, in the foreground: PostgreSQL from DATABASE_URL or an "
        "embedded one, the migrations, the API on 127.0.0.1:50051 and two workers. Needs a source checkout.",
    )
    return parser


def _add_lifecycle(commands: Subcommands) -> None:
    watch = commands.add_parser(
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
    cancel = commands.add_parser("cancel", help="cancel a job: at once if it waits, at its next heartbeat if running")
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.add_argument("--reason", default="", help="recorded in the job's history")
    retry = commands.add_parser(
        "retry", help="run a FAILED, CANCELLED or OUTCOME_UNKNOWN job again, recorded with who and why"
    )
    retry.add_argument("job_id", metavar="JOB_ID")
    retry.add_argument("--reason", default="", help="recorded in the job's history")
    retry.add_argument(
        "--accept-duplicate-risk",
        action="store_true",
        help="required for OUTCOME_UNKNOWN: the earlier attempt's effect may already have happened",
    )
    events = commands.add_parser("events", help="a job's recorded transitions, oldest first (every page)")
    events.add_argument("job_id", metavar="JOB_ID")


def _add_submit(commands: Subcommands) -> None:
    submit = commands.add_parser("submit", help="submit a job; prints its id")
    submit.add_argument("kind", metavar="KIND", help="registered job kind, e.g. echo, sleep, flaky, summarize")
    payload = submit.add_mutually_exclusive_group()
    payload.add_argument("--payload", metavar="TEXT", help="payload as UTF-8 text; '-' reads stdin")
    payload.add_argument("--payload-file", metavar="PATH", help="payload from a file; '-' reads stdin")
    submit.add_argument("--idempotency-key", metavar="K", default="")
    submit.add_argument("--priority", type=int, default=0, metavar="N", help="higher runs first; -1000 to 1000")
    submit.add_argument("--max-attempts", type=int, default=0, metavar="N", help="0 means the kind's default")
    submit.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable")
    submit.add_argument("--resource-key", metavar="K", default="")
    submit.add_argument("--resource-version", type=int, metavar="V", default=0)


def _add_list(commands: Subcommands) -> None:
    listing = commands.add_parser("list", help="list jobs, newest first")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="S",
        help=f"repeatable; one of {', '.join(s.lower() for s in state_choices())}",
    )
    listing.add_argument("--kind", default="")
    listing.add_argument("--resource-key", default="", metavar="K")
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


def submit_request(args: argparse.Namespace, stdin: BinaryIO) -> jobs_pb2.SubmitJobRequest:
    """Checks only what the CLI can know better than the server: pairs of flags and their syntax."""
    if bool(args.resource_key) != bool(args.resource_version):
        raise UsageError("--resource-key and --resource-version go together")
    return jobs_pb2.SubmitJobRequest(
        kind=args.kind,
        payload=read_payload(args, stdin),
        idempotency_key=args.idempotency_key,
        priority=args.priority,
        max_attempts=args.max_attempts,
        labels=parse_labels(args.label),
        resource_key=args.resource_key,
        resource_version=args.resource_version,
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
        labels=parse_labels(args.label),
        page_size=args.page_size,
        page_token=args.page_token,
    )
