"""How jobs, pages and results look on a terminal (text) and to scripts (json)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

from google.protobuf import json_format, timestamp_pb2
from google.protobuf.message import Message

from durable_jobs import JobLogLine
from jobs.v1 import jobs_pb2

_STATE_PREFIX = "JOB_STATE_"
_CATEGORY_PREFIX = "ERROR_CATEGORY_"
_TABLE_COLUMNS = ("JOB_ID", "KIND", "STATE", "ATTEMPTS", "PRIORITY", "CREATED_AT")


def state_name(state: int) -> str:
    return jobs_pb2.JobState.Name(state).removeprefix(_STATE_PREFIX)


def parse_state(text: str) -> jobs_pb2.JobState:
    """Accepts `succeeded`, `SUCCEEDED` or `JOB_STATE_SUCCEEDED`; raises ValueError otherwise."""
    name = text.strip().upper().removeprefix(_STATE_PREFIX)
    if name == "UNSPECIFIED":
        raise ValueError(text)
    # The generated .pyi types Value() as int and the field as JobState: the same int at run time.
    return cast(jobs_pb2.JobState, jobs_pb2.JobState.Value(_STATE_PREFIX + name))


def state_choices() -> list[str]:
    return [state_name(v) for v in jobs_pb2.JobState.values() if v != jobs_pb2.JOB_STATE_UNSPECIFIED]


def timestamp_text(message: Message, field: str) -> str:
    if not message.HasField(field):
        return "-"
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return stamp.ToJsonString()


def message_json(message: Message) -> str:
    """Proto3 JSON with the proto field names, defaults included; bytes are base64 as the mapping says."""
    as_dict = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return json.dumps(as_dict, indent=2, sort_keys=False)


def message_json_line(message: Message) -> str:
    """The same JSON on one line: a stream of them is one object per line (JSON Lines)."""
    as_dict = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return json.dumps(as_dict, separators=(",", ":"))


def job_text(job: jobs_pb2.Job) -> str:
    """One `name  value` line per field that says something."""
    rows: list[tuple[str, str]] = [
        ("job_id", job.job_id),
        ("kind", job.kind),
        ("state", state_name(job.state)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("created_at", timestamp_text(job, "created_at")),
        ("run_after", timestamp_text(job, "run_after")),
        ("started_at", timestamp_text(job, "started_at")),
        ("finished_at", timestamp_text(job, "finished_at")),
    ]
    optional: list[tuple[str, str]] = [
        ("deadline", timestamp_text(job, "deadline") if job.HasField("deadline") else ""),
        ("resource", f"{job.resource_key} version {job.resource_version}" if job.resource_key else ""),
        ("parent_job_id", job.parent_job_id),
        ("depends_on", ", ".join(job.depends_on)),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items()))),
        ("idempotency_key", job.idempotency_key),
        ("cancel_requested", "yes" if job.cancel_requested else ""),
        ("last_error", _error_text(job) if job.HasField("last_error") else ""),
        (
            "progress",
            f"{progress_text(job.progress)} (attempt {job.progress.attempt})" if job.HasField("progress") else "",
        ),
        ("checkpoints", ", ".join(f"{c.stage} (attempt {c.attempt})" for c in job.checkpoints)),
        ("waiting_reason", _waiting_text(job)),
    ]
    rows += [(name, value) for name, value in optional if value]
    rows += [("sequence", str(job.sequence)), ("fencing_token", str(job.fencing_token))]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _waiting_text(job: jobs_pb2.Job) -> str:
    """Why a job whose time has come is not started, and the key that holds it."""
    if not job.waiting_reason:
        return ""
    return f"{job.waiting_reason} ({job.waiting_for_key})" if job.waiting_for_key else job.waiting_reason


def _error_text(job: jobs_pb2.Job) -> str:
    category = jobs_pb2.ErrorCategory.Name(job.last_error.category).removeprefix(_CATEGORY_PREFIX)
    return f"{category}: {job.last_error.message}"


def jobs_table(jobs: list[jobs_pb2.Job]) -> str:
    """Left-aligned columns sized to their widest cell; a header even when there are no rows."""
    rows = [_TABLE_COLUMNS] + [
        (
            job.job_id,
            job.kind,
            state_name(job.state),
            f"{job.attempts}/{job.max_attempts}",
            str(job.priority),
            timestamp_text(job, "created_at"),
        )
        for job in jobs
    ]
    return table(rows)


# The states a failed attempt leads to: only there is last_error the reason for the line.
_STATES_ENDED_BY_AN_ERROR = frozenset(
    {jobs_pb2.JOB_STATE_RETRY_WAIT, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN}
)


def transition_line(job: jobs_pb2.Job, elapsed_seconds: float) -> str:
    """One line per state the job reached, for `watch`: when (since watching began), sequence, state,
    attempt, and what a person needs next (the error, the next attempt's time, a pending cancel)."""
    parts = [
        f"{_clock(elapsed_seconds):>8}",
        f"#{job.sequence:<3}",
        f"{state_name(job.state):<15}",
        f"attempt {job.attempts} of {job.max_attempts}",
    ]
    if job.state == jobs_pb2.JOB_STATE_RETRY_WAIT:
        parts.append(f"next attempt at {timestamp_text(job, 'run_after')}")
    if job.HasField("last_error") and job.state in _STATES_ENDED_BY_AN_ERROR:
        parts.append(f"last error {_error_text(job)}")
    if job.cancel_requested and job.state == jobs_pb2.JOB_STATE_RUNNING:
        parts.append("cancel requested")
    if job.HasField("progress") and job.state == jobs_pb2.JOB_STATE_RUNNING:
        parts.append(progress_text(job.progress))
    return "  ".join(parts)


def progress_text(progress: jobs_pb2.JobProgress) -> str:
    """`progress 45% extracting text` (the message only when the handler gave one)."""
    text = f"progress {progress.fraction * 100:.0f}%"
    return f"{text} {progress.message}" if progress.message else text


def watch_status(job: jobs_pb2.Job, in_state_seconds: float, total_seconds: float) -> str:
    """The live line under the transitions: how long the current state has lasted."""
    status = (
        f"{state_name(job.state)} for {_clock(in_state_seconds)}, attempt {job.attempts} of {job.max_attempts}, "
        f"watching {_clock(total_seconds)}"
    )
    if job.HasField("progress") and job.state == jobs_pb2.JOB_STATE_RUNNING:
        status += f", {progress_text(job.progress)}"
    return status


def _clock(seconds: float) -> str:
    minutes, rest = divmod(max(seconds, 0.0), 60)
    return f"{int(minutes)}:{rest:04.1f}"


_EVENT_COLUMNS = ("SEQ", "AT", "FROM", "TO", "ATTEMPT", "FENCING", "ACTOR", "REASON")


def events_table(events: list[jobs_pb2.JobEvent]) -> str:
    """A job's history, oldest first, one transition per row."""
    rows = [_EVENT_COLUMNS] + [
        (
            str(event.sequence),
            timestamp_text(event, "at"),
            "-" if event.from_state == jobs_pb2.JOB_STATE_UNSPECIFIED else state_name(event.from_state),
            state_name(event.to_state),
            str(event.attempt),
            str(event.fencing_token),
            event.actor,
            event.reason,
        )
        for event in events
    ]
    return "\n".join([table(rows), *_attempt_errors(events)])


def _attempt_errors(events: list[jobs_pb2.JobEvent]) -> list[str]:
    """Below the table: each failed attempt's error, with its traceback indented."""
    lines = []
    for event in events:
        if not event.HasField("error"):
            continue
        category = jobs_pb2.ErrorCategory.Name(event.error.category).removeprefix(_CATEGORY_PREFIX)
        lines += ["", f"attempt {event.attempt} (seq {event.sequence}) {category}: {event.error.message}"]
        lines += [f"    {line}" for line in event.error.traceback.rstrip().splitlines()]
    return lines


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Left-aligned columns sized to their widest cell; the first row is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def log_text(lines: list[JobLogLine]) -> str:
    """A job's handler log: a heading per attempt, then one line per record (a traceback indented)."""
    out: list[str] = []
    lease = None
    for line in lines:
        if line.fencing_token != lease:
            lease = line.fencing_token
            out.append(f"attempt {line.attempt} (fencing token {line.fencing_token})")
        at = line.at.strftime("%H:%M:%S.%f")[:-3] if line.at else "-"
        first, *rest = line.message.splitlines() or [""]
        out.append(f"  {at} {line.level:<7} {line.logger}: {first}")
        out += [f"      {more}" for more in rest]
    return "\n".join(out) if out else "(nothing logged)"


def log_line_proto(line: JobLogLine) -> jobs_pb2.JobLogLine:
    message = jobs_pb2.JobLogLine(
        attempt=line.attempt,
        fencing_token=line.fencing_token,
        sequence=line.sequence,
        level=line.level,
        logger=line.logger,
        message=line.message,
    )
    if line.at is not None:
        message.at.FromDatetime(line.at)
    return message
