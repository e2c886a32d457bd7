"""The operators' commands (jobs.v1.AdminService): limits, kinds, tenants and admin; parser and the
requests built from what was parsed (no network here)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from google.protobuf import timestamp_pb2

from jobs.v1 import admin_pb2
from jobsctl.arguments import TIME_EXAMPLE, UsageError, parse_labels, parse_time
from jobsctl.rendering import parse_state, state_choices

AddParser = Callable[..., argparse.ArgumentParser]
_REASON_HELP = "why (required): recorded with your name, in admin_actions and in each job's history"
_SETTING_REASON_HELP = "why: recorded with your name in admin_actions"


def add_admin_commands(command: AddParser, parents: list[argparse.ArgumentParser]) -> None:
    _add_limits(command("limits", help="operators: limits by key (SetLimit, DeleteLimit, ListLimits)"), parents)
    _add_kinds(command("kinds", help="operators: published kinds, pause and resume them"), parents)
    _add_tenants(command("tenants", help="operators: tenant weights in the fair share"), parents)
    _add_admin(command("admin", help="operators: jobs of every tenant; bulk cancel and retry by filter"), parents)


def _actions(group: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> AddParser:
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add(name: str, **options: object) -> argparse.ArgumentParser:
        return actions.add_parser(name, parents=parents, **options)  # type: ignore[arg-type]

    return add


def _add_limits(group: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    action = _actions(group, parents)
    set_limit = action(
        "set",
        help="set the limit of KEY",
        description="At most --max-running jobs that carry KEY run at once across all workers, and they start at "
        "no more than --rate per second (token bucket of --burst). 0 means no bound of that kind.",
    )
    set_limit.add_argument("key", metavar="KEY", help="e.g. kind:echo, tenant:acme, provider:openai")
    set_limit.add_argument("--max-running", type=int, default=0, metavar="N")
    set_limit.add_argument("--rate", type=float, default=0.0, metavar="R", help="starts per second")
    set_limit.add_argument("--burst", type=int, default=1, metavar="B", help="default 1")
    set_limit.add_argument("--reason", default="", help=_SETTING_REASON_HELP)
    action("list", help="every limit in force")
    delete = action("delete", help="remove the limit of KEY")
    delete.add_argument("key", metavar="KEY")
    delete.add_argument("--reason", default="", help=_SETTING_REASON_HELP)


def _add_kinds(group: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    action = _actions(group, parents)
    listing = action("list", help="published kinds: policy, paused, publishers, policy conflicts")
    listing.add_argument("--include-retired", action="store_true")
    for name, text in (
        ("pause", "pause KIND: its waiting jobs are not claimed (submissions are still accepted)"),
        ("resume", "resume a paused KIND"),
        ("retire", "retire KIND: submissions of it are refused until a worker publishes it again"),
    ):
        command = action(name, help=text)
        command.add_argument("kind", metavar="KIND")
        command.add_argument("--reason", default="", help=_SETTING_REASON_HELP)


def _add_tenants(group: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    action = _actions(group, parents)
    weight = action("weight", help="set TENANT's weight (1 to 10000; tenants without one weigh 1)")
    weight.add_argument("tenant", metavar="TENANT")
    weight.add_argument("weight", metavar="W", type=int)
    weight.add_argument("--reason", default="", help=_SETTING_REASON_HELP)
    action("weights", help="every tenant weight set")


def _add_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", default="", help="only this tenant's jobs (default: every tenant)")
    parser.add_argument(
        "--state", action="append", default=[], metavar="S", help=f"repeatable; one of {', '.join(state_choices())}"
    )
    parser.add_argument("--kind", default="")
    parser.add_argument("--label", action="append", default=[], metavar="K=V", help="repeatable; all must match")
    parser.add_argument("--resource-key", default="", metavar="K")
    parser.add_argument("--error-text", default="", metavar="TEXT", help="in the latest error's message (any case)")
    times = f"RFC 3339 ({TIME_EXAMPLE}) or a span back from now (2h: two hours ago)"
    parser.add_argument("--created-after", type=parse_time, metavar="TIME", help=times)
    parser.add_argument("--created-before", type=parse_time, metavar="TIME", help=times)


def _add_admin(group: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    action = _actions(group, parents)
    search = action("search", help="jobs of every tenant by filter, newest first")
    _add_filter(search)
    search.add_argument("--page-size", type=int, default=0, metavar="N", help="1 to 500 (server default 50)")
    search.add_argument("--page-token", default="", metavar="T")
    get = action("get", help="any tenant's job")
    get.add_argument("job_id", metavar="JOB_ID")
    events = action("events", help="any tenant's job history, oldest first")
    events.add_argument("job_id", metavar="JOB_ID")
    for name, text in (
        ("cancel", "cancel the unfinished jobs the filter matches"),
        ("retry", "retry the FAILED, CANCELLED and OUTCOME_UNKNOWN jobs the filter matches"),
    ):
        bulk = action(
            name,
            help=text,
            description="First --dry-run: it prints how many jobs match. Then run it again with --expected-count "
            "set to that count: when more jobs match by then, nothing is done. The call may take about a "
            "millisecond per job; it waits up to 900 s unless --timeout says otherwise.",
        )
        _add_filter(bulk)
        bulk.add_argument("--reason", required=True, help=_REASON_HELP)
        mode = bulk.add_mutually_exclusive_group(required=True)
        mode.add_argument("--dry-run", action="store_true", help="count the jobs, change nothing")
        mode.add_argument("--expected-count", type=int, metavar="N", help="the count the dry run printed")
        if name == "retry":
            bulk.add_argument(
                "--accept-duplicate-risk",
                action="store_true",
                help="also retry OUTCOME_UNKNOWN jobs, whose earlier effect may already have happened",
            )


def _past_timestamp(when: datetime | timedelta | None, now: datetime) -> timestamp_pb2.Timestamp | None:
    """A span counts back from now: a filter on creation times looks into the past."""
    if when is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(now - when if isinstance(when, timedelta) else when)
    return stamp


def job_filter(args: argparse.Namespace, now: datetime | None = None) -> admin_pb2.JobFilter:
    now = now or datetime.now(UTC)
    states = []
    for text in args.state:
        try:
            states.append(parse_state(text))
        except ValueError:
            raise UsageError(f"unknown state {text!r}; one of {', '.join(state_choices())}") from None
    return admin_pb2.JobFilter(
        tenant=args.tenant,
        states=states,
        kind=args.kind,
        labels=parse_labels(args.label),
        resource_key=args.resource_key,
        error_text=args.error_text,
        created_after=_past_timestamp(args.created_after, now),
        created_before=_past_timestamp(args.created_before, now),
    )
