"""`jobsctl schedules create|get|list|pause|resume|trigger|delete`: recurring submissions."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from jobs.v1 import jobs_pb2
from jobsctl.arguments import parse_labels, read_payload
from jobsctl.rendering import message_json, table, timestamp_text
from jobsctl.rpc_errors import EXIT_OK

if TYPE_CHECKING:
    from jobsctl.commands import Call, Console

OVERLAP_POLICIES = {
    "skip": jobs_pb2.SCHEDULE_OVERLAP_POLICY_SKIP,
    "buffer-one": jobs_pb2.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
    "allow": jobs_pb2.SCHEDULE_OVERLAP_POLICY_ALLOW,
}
_POLICY_NAMES = {number: name for name, number in OVERLAP_POLICIES.items()}
LIST_PAGE_SIZE = 500


def schedule_text(schedule: jobs_pb2.Schedule) -> str:
    rows = [
        ("schedule_id", schedule.schedule_id),
        ("kind", schedule.job.kind),
        ("cron", f"{schedule.cron} ({schedule.time_zone})"),
        *([("warning", schedule.cron_warning)] if schedule.cron_warning else []),
        ("overlap", _POLICY_NAMES.get(schedule.overlap_policy, "?")),
        ("catch_up_window", f"{schedule.catchup_window_seconds}s"),
        ("paused", "yes" if schedule.paused else "no"),
        ("next_fire_at", timestamp_text(schedule, "next_fire_at")),
        ("buffered_fire_at", timestamp_text(schedule, "buffered_fire_at")),
        ("last_fire_at", timestamp_text(schedule, "last_fire_at")),
        ("last_job_id", schedule.last_job_id or "-"),
        (
            "fires",
            f"{schedule.fires_submitted} submitted, {schedule.fires_missed} missed, {schedule.fires_skipped} skipped",
        ),
        ("note", schedule.note or "-"),
        ("last_error", schedule.last_error or "-"),
    ]
    return table(rows)


def _print(schedule: jobs_pb2.Schedule, args: argparse.Namespace, console: Console) -> int:
    print(message_json(schedule) if args.output == "json" else schedule_text(schedule), file=console.stdout)
    return EXIT_OK


def _create(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.CreateScheduleRequest(
        schedule_id=args.schedule_id,
        job=jobs_pb2.SubmitJobRequest(
            kind=args.kind,
            payload=read_payload(args, console.stdin),
            priority=args.priority,
            max_attempts=args.max_attempts,
            labels=parse_labels(args.label),
        ),
        cron=args.cron,
        time_zone=args.time_zone,
        overlap_policy=OVERLAP_POLICIES[args.overlap],
        catchup_window_seconds=args.catch_up_window,
        paused=args.paused,
        note=args.note,
    )
    created = call.stub.CreateSchedule(request, timeout=call.timeout, metadata=call.metadata)
    if created.cron_warning:
        print(f"jobsctl: warning: {created.cron_warning}", file=console.stderr)
    return _print(created, args, console)


def _get(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.GetScheduleRequest(schedule_id=args.schedule_id)
    return _print(call.stub.GetSchedule(request, timeout=call.timeout, metadata=call.metadata), args, console)


def _list(call: Call, args: argparse.Namespace, console: Console) -> int:
    schedules: list[jobs_pb2.Schedule] = []
    token = ""
    while True:
        request = jobs_pb2.ListSchedulesRequest(page_size=LIST_PAGE_SIZE, page_token=token)
        page = call.stub.ListSchedules(request, timeout=call.timeout, metadata=call.metadata)
        schedules += page.schedules
        token = page.next_page_token
        if not token:
            break
    if args.output == "json":
        print(message_json(jobs_pb2.ListSchedulesResponse(schedules=schedules)), file=console.stdout)
        return EXIT_OK
    rows = [("SCHEDULE", "KIND", "CRON", "ZONE", "PAUSED", "NEXT FIRE", "SUBMITTED", "MISSED", "SKIPPED")]
    rows += [
        (
            s.schedule_id,
            s.job.kind,
            s.cron,
            s.time_zone,
            "yes" if s.paused else "no",
            timestamp_text(s, "next_fire_at"),
            str(s.fires_submitted),
            str(s.fires_missed),
            str(s.fires_skipped),
        )
        for s in schedules
    ]
    print(table(rows), file=console.stdout)
    return EXIT_OK


def _pause(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.PauseScheduleRequest(schedule_id=args.schedule_id, note=args.note)
    return _print(call.stub.PauseSchedule(request, timeout=call.timeout, metadata=call.metadata), args, console)


def _resume(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.ResumeScheduleRequest(schedule_id=args.schedule_id, note=args.note)
    return _print(call.stub.ResumeSchedule(request, timeout=call.timeout, metadata=call.metadata), args, console)


def _trigger(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.TriggerScheduleRequest(schedule_id=args.schedule_id)
    response = call.stub.TriggerSchedule(request, timeout=call.timeout, metadata=call.metadata)
    if args.output == "json":
        print(message_json(response), file=console.stdout)
    else:
        print(response.job.job_id, file=console.stdout)
    return EXIT_OK


def _delete(call: Call, args: argparse.Namespace, console: Console) -> int:
    request = jobs_pb2.DeleteScheduleRequest(schedule_id=args.schedule_id)
    call.stub.DeleteSchedule(request, timeout=call.timeout, metadata=call.metadata)
    print(f"schedule {args.schedule_id} deleted; the jobs it submitted stay", file=console.stderr)
    return EXIT_OK


_ACTIONS = {
    "create": _create,
    "get": _get,
    "list": _list,
    "pause": _pause,
    "resume": _resume,
    "trigger": _trigger,
    "delete": _delete,
}


def run_schedules(call: Call, args: argparse.Namespace, console: Console) -> int:
    return _ACTIONS[args.schedules_command](call, args, console)
