"""jobsctl without a server: argument parsing, request building, output formatting, error display."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import sys
import time
import uuid
from concurrent import futures
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from durable_jobs import Client
from durable_jobs.errors import NotFound, Unavailable
from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from jobsctl.__main__ import main
from jobsctl.admin_commands import ADMIN_COMMANDS
from jobsctl.arguments import (
    TIMEOUT_SECONDS_DEFAULT,
    UsageError,
    build_parser,
    list_request,
    parse_time,
    submit_request,
)
from jobsctl.commands import COMMANDS, Call, Console
from jobsctl.dev import run_dev
from jobsctl.rendering import events_table, job_text, jobs_table, message_json, parse_state, transition_line
from jobsctl.rpc_errors import describe
from jobsctl.submit_batch import BatchLine, chunked, read_batch
from jobsctl.watch import EXIT_BY_SETTLED_STATE, StatusLine, follow

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(10)

NO_ENV: dict[str, str] = {}


def _parse(*argv: str, env: dict[str, str] = NO_ENV):
    return build_parser(env).parse_args(argv)


def _console(stdin: bytes = b"") -> tuple[Console, io.StringIO, io.BytesIO, io.StringIO]:
    out, out_bytes, err = io.StringIO(), io.BytesIO(), io.StringIO()
    return Console(io.BytesIO(stdin), out, out_bytes, err), out, out_bytes, err


def test_target_and_token_come_from_the_environment_unless_given() -> None:
    env = {"JOBS_API_TARGET": "10.0.0.1:1234", "JOBS_TOKEN": "from-env"}
    assert (_parse("get", "j").target, _parse("get", "j").token) == ("127.0.0.1:50051", None)
    assert (_parse("get", "j", env=env).target, _parse("get", "j", env=env).token) == ("10.0.0.1:1234", "from-env")
    args = _parse("--target", "h:1", "--token", "t", "get", "j", env=env)
    assert (args.target, args.token) == ("h:1", "t")


def test_submit_builds_the_request_from_every_flag() -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    args = _parse(
        "submit", "echo", "--payload", "héllo", "--idempotency-key", "k1", "--priority", "7",
        "--max-attempts", "4", "--label", "team=core", "--label", "env=a=b",
        "--resource-key", "doc-1", "--resource-version", "3",
        "--run-after", "2030-01-31T10:00:00+01:00", "--deadline", "2h",
        "--depends-on", first, "--depends-on", second, "--dedupe-by-input",
    )  # fmt: skip
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    request = submit_request(args, io.BytesIO(), now=now)
    assert request == jobs_pb2.SubmitJobRequest(
        kind="echo",
        payload="héllo".encode(),
        idempotency_key="k1",
        priority=7,
        max_attempts=4,
        labels={"team": "core", "env": "a=b"},
        resource_key="doc-1",
        resource_version=3,
        run_after=timestamp_pb2.Timestamp(seconds=int(datetime(2030, 1, 31, 9, 0, tzinfo=UTC).timestamp())),
        deadline=timestamp_pb2.Timestamp(seconds=int((now + timedelta(hours=2)).timestamp())),
        depends_on=[first, second],
        dedupe_by_input=True,
    )


def test_without_time_flags_the_request_has_no_times() -> None:
    request = submit_request(_parse("submit", "echo"), io.BytesIO())
    assert not request.HasField("run_after") and not request.HasField("deadline")
    assert (list(request.depends_on), request.dedupe_by_input) == ([], False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("+10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5d", timedelta(days=1.5)),
        ("2030-01-31T09:00:00Z", datetime(2030, 1, 31, 9, 0, tzinfo=UTC)),
        ("2030-01-31T09:00:00.250-05:00", datetime(2030, 1, 31, 14, 0, 0, 250_000, tzinfo=UTC)),
    ],
)
def test_times_are_rfc3339_with_an_offset_or_a_span_from_now(text: str, expected: object) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["2030-01-31T09:00:00", "tomorrow", "", "10x", "m"])
def test_a_time_without_an_offset_or_unreadable_is_a_usage_error(text: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parse("submit", "echo", "--run-after", text)
    assert exit_info.value.code == 2


def test_global_options_may_follow_the_command() -> None:
    args = _parse("result", "--wait", "--timeout", "20", "job-1")
    assert (args.wait, args.timeout, args.job_id) == (True, 20.0, "job-1")
    args = _parse("get", "j", "--target", "h:2", "-o", "json", "--token", "t")
    assert (args.target, args.output, args.token) == ("h:2", "json", "t")
    # Written before the command and not after it, a value stays; written after, it wins.
    before = _parse("--target", "h:1", "--timeout", "3", "get", "j")
    assert (before.target, before.timeout, before.output) == ("h:1", 3.0, "text")
    assert _parse("--target", "h:1", "get", "j", "--target", "h:2").target == "h:2"
    assert _parse("get", "j", env={"JOBS_API_TARGET": "env:1"}).target == "env:1"
    assert _parse("get", "j").timeout is None, "no --timeout: per-call default, and result --wait waits on"


def _call(fake: object, token: str, timeout: float) -> Call:
    """A Call over a fake that has only the stub methods the command under test calls."""
    return Call(cast(jobs_pb2_grpc.JobServiceStub, fake), token, timeout)


DEADLINE_SLACK_SECONDS = 0.5


@pytest.mark.parametrize(("argv", "watch_timeout"), [((), None), (("--timeout", "20"), 20.0)])
def test_result_wait_waits_until_the_job_settles_unless_a_timeout_is_given(argv, watch_timeout) -> None:
    service = _ScriptedJobService([([_state(jobs_pb2.JOB_STATE_SUCCEEDED, 3)], None)])
    with service.client() as client:
        args = _parse("result", "--wait", "j", *argv)
        console, _, out_bytes, _ = _console()
        timeout = args.timeout or TIMEOUT_SECONDS_DEFAULT
        call = Call(jobs_pb2_grpc.JobServiceStub(client.channel), "token", timeout, None, client)
        assert COMMANDS["result"](call, args, console) == 0
    assert out_bytes.getvalue() == b"done"
    (watched,) = service.watch_deadlines
    if watch_timeout is None:
        assert watched is None
    else:
        # The server's clock reads the deadline up to a tenth of a second past the client's timeout (gRPC
        # core's cached time; 15 of 60 calls beside two busy loops): far from the 30 s default all the same.
        assert watched is not None and 0 < watched <= watch_timeout + DEADLINE_SLACK_SECONDS, watched


def _batch_file(*lines: str) -> io.BytesIO:
    return io.BytesIO("".join(line + "\n" for line in lines).encode())


def test_a_batch_file_is_one_submit_request_per_line_blank_lines_skipped() -> None:
    source = _batch_file(
        '{"kind": "echo", "payload": "aGk=", "idempotency_key": "a"}',
        "",
        '{"kind": "sleep", "depends_on": ["00000000-0000-4000-8000-000000000000"], "labels": {"x": "1"}}',
    )
    lines = read_batch(source)
    assert [line.number for line in lines] == [1, 3]
    assert lines[0].request == jobs_pb2.SubmitJobRequest(kind="echo", payload=b"hi", idempotency_key="a")
    assert list(lines[1].request.depends_on) == ["00000000-0000-4000-8000-000000000000"]


def test_bad_batch_lines_are_all_named_before_anything_is_sent() -> None:
    source = _batch_file('{"kind": "echo"}', "not json", '{"kind": "echo", "colour": "red"}', '{"kind": "echo"}')
    with pytest.raises(UsageError) as refused:
        read_batch(source)
    text = str(refused.value)
    assert "nothing was sent" in text
    assert [line.split(":")[0].strip() for line in text.splitlines()[1:]] == ["line 2", "line 3"]
    assert "colour" in text


def _batch_lines(count: int, payload: bytes = b"") -> list[BatchLine]:
    return [BatchLine(n, jobs_pb2.SubmitJobRequest(kind="echo", payload=payload)) for n in range(1, count + 1)]


def test_batches_are_chunked_by_count_and_by_encoded_size() -> None:
    assert [len(c) for c in chunked(_batch_lines(7), 3)] == [3, 3, 1]
    big = _batch_lines(5, payload=b"x" * 1000)
    by_size = list(chunked(big, 100, max_bytes=2500))
    assert [len(c) for c in by_size] == [2, 2, 1]
    assert [line.number for chunk in by_size for line in chunk] == [1, 2, 3, 4, 5]
    assert [len(c) for c in chunked(_batch_lines(2, payload=b"x" * 5000), 100, max_bytes=2500)] == [1, 1]


class _BatchStub:
    """SubmitJobs that accepts its first `accepted` chunks and refuses the next like the API does."""

    def __init__(self, accepted: int, refusal: grpc.RpcError) -> None:
        self.accepted, self.refusal = accepted, refusal
        self.chunks: list[int] = []

    def SubmitJobs(self, request, timeout, metadata):  # noqa: N802
        self.chunks.append(len(request.jobs))
        if len(self.chunks) > self.accepted:
            raise self.refusal
        return jobs_pb2.SubmitJobsResponse(
            results=[
                jobs_pb2.SubmitJobResponse(job=jobs_pb2.Job(job_id=f"id-{len(self.chunks)}-{i}"), created=True)
                for i in range(len(request.jobs))
            ]
        )


def test_a_refused_chunk_names_file_lines_and_earlier_chunks_stay_printed(tmp_path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"kind": "echo"}\n\n{"kind": "echo"}\n{"kind": "echo"}\n{"kind": "nope"}\n{"kind": "echo"}\n')
    stub = _BatchStub(1, _invalid("jobs[1].kind"))
    console, out, _, err = _console()
    args = _parse("submit-batch", str(path), "--chunk-size", "2")
    assert COMMANDS["submit-batch"](_call(stub, "t", 5.0), args, console) == 2
    assert stub.chunks == [2, 2], "the chunk after the refused one is not sent"
    assert out.getvalue().split() == ["id-1-0", "id-1-1"]
    assert err.getvalue().splitlines() == [
        "jobsctl: error: INVALID_ARGUMENT",
        "  line 5: kind: bad",
        "jobsctl: lines 4-5 were not submitted, nor any line after them; "
        "2 jobs of the lines before were submitted (their ids are on stdout)",
    ]


def test_a_lost_answer_says_the_chunk_may_exist_and_a_rerun_is_safe_with_keys(tmp_path) -> None:
    stub = _BatchStub(0, _FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    console, out, _, err = _console(b'{"kind": "echo", "idempotency_key": "k"}\n')
    assert COMMANDS["submit-batch"](_call(stub, "t", 5.0), _parse("submit-batch", "-"), console) == 5
    assert out.getvalue() == ""
    assert "lines 1-1 may or may not have been submitted" in err.getvalue()
    assert "idempotency_key" in err.getvalue()


def test_cancel_help_says_a_running_job_is_stopped_by_notification(capsys) -> None:
    with pytest.raises(SystemExit):
        _parse("cancel", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "next heartbeat" not in text.split("should the notification be lost")[0]
    assert "notifies its worker" in text and "within milliseconds" in text


@pytest.mark.parametrize("flag", ["--payload", "--payload-file"])
def test_a_dash_payload_reads_stdin_as_bytes(flag: str) -> None:
    request = submit_request(_parse("submit", "echo", flag, "-"), io.BytesIO(b"\x00\xffraw"))
    assert request.payload == b"\x00\xffraw"


def test_payload_file_is_read_as_bytes(tmp_path) -> None:
    path = tmp_path / "input.bin"
    path.write_bytes(b"\x01\x02")
    assert submit_request(_parse("submit", "echo", "--payload-file", str(path)), io.BytesIO()).payload == b"\x01\x02"


def test_a_missing_payload_file_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match="cannot read --payload-file"):
        submit_request(_parse("submit", "echo", "--payload-file", str(tmp_path / "absent")), io.BytesIO())


@pytest.mark.parametrize(
    "extra",
    [["--label", "novalue"], ["--label", "=v"], ["--resource-key", "doc"], ["--resource-version", "2"]],
)
def test_malformed_submit_flags_are_usage_errors(extra: list[str]) -> None:
    with pytest.raises(UsageError):
        submit_request(_parse("submit", "echo", *extra), io.BytesIO())


@pytest.mark.parametrize(
    "argv",
    [
        ["submit"],
        ["submit", "echo", "--payload", "a", "--payload-file", "b"],
        ["submit", "echo", "--priority", "high"],
        ["--output", "yaml", "get", "j"],
        ["--timeout", "0", "get", "j"],
        ["frobnicate"],
        [],
    ],
)
def test_argparse_rejects_bad_command_lines_with_exit_code_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parse(*argv)
    assert exit_info.value.code == 2


def test_states_are_accepted_in_any_spelling() -> None:
    request = list_request(_parse("list", "--state", "pending", "--state", "RETRY_WAIT", "--state", "JOB_STATE_FAILED"))
    assert list(request.states) == [
        jobs_pb2.JOB_STATE_PENDING,
        jobs_pb2.JOB_STATE_RETRY_WAIT,
        jobs_pb2.JOB_STATE_FAILED,
    ]
    with pytest.raises(ValueError):
        parse_state("unspecified")


def test_list_builds_filters_and_paging() -> None:
    args = _parse("list", "--kind", "echo", "--label", "a=1", "--page-size", "5", "--page-token", "tok")
    assert list_request(args) == jobs_pb2.ListJobsRequest(kind="echo", labels={"a": "1"}, page_size=5, page_token="tok")
    with pytest.raises(UsageError, match="unknown state"):
        list_request(_parse("list", "--state", "sleeping"))


def test_no_token_is_a_usage_error_before_any_call() -> None:
    console, _, _, err = _console()
    assert main(["get", "some-id"], console) == 2
    assert "JOBS_TOKEN" in err.getvalue()


def _job(**fields) -> jobs_pb2.Job:
    defaults = {"job_id": "0b6c9c1e-aaaa", "kind": "echo", "state": jobs_pb2.JOB_STATE_SUCCEEDED}
    job = jobs_pb2.Job(**{**defaults, **fields})
    job.created_at.CopyFrom(timestamp_pb2.Timestamp(seconds=1_700_000_000))
    return job


def test_job_text_names_state_without_prefix_and_skips_empty_optional_fields() -> None:
    text = job_text(_job(attempts=1, max_attempts=3, labels={"b": "2", "a": "1"}, sequence=4))
    lines = dict(line.split(None, 1) for line in text.splitlines())
    assert lines["state"] == "SUCCEEDED"
    assert lines["attempts"] == "1 of 3"
    assert lines["created_at"] == "2023-11-14T22:13:20Z"
    assert lines["started_at"] == "-"
    assert lines["labels"] == "a=1, b=2"
    assert "resource" not in lines and "last_error" not in lines and "cancel_requested" not in lines


def test_job_text_says_why_a_due_job_waits_and_for_which_key() -> None:
    waiting = _job(waiting_reason="limit_running", waiting_for_key="provider:openai")
    lines = dict(line.split(None, 1) for line in job_text(waiting).splitlines())
    assert lines["waiting_reason"] == "limit_running (provider:openai)"
    assert "waiting_reason" not in job_text(_job())


def test_job_text_shows_the_last_error_with_its_category() -> None:
    job = _job(last_error=jobs_pb2.JobError(category=jobs_pb2.ERROR_CATEGORY_RETRYABLE, message="boom"))
    assert "last_error     RETRYABLE: boom" in job_text(job).splitlines()


def test_jobs_table_aligns_columns_and_has_a_header_when_empty() -> None:
    assert jobs_table([]).split() == ["JOB_ID", "KIND", "STATE", "ATTEMPTS", "PRIORITY", "CREATED_AT"]
    lines = jobs_table([_job(max_attempts=3), _job(kind="summarize", priority=-5)]).splitlines()
    assert len(lines) == 3
    state_column = lines[0].index("STATE")
    assert all(line[state_column:].startswith(("STATE", "SUCCEEDED")) for line in lines)


def test_json_uses_proto_field_names_enum_names_and_base64_bytes() -> None:
    result = json.loads(message_json(jobs_pb2.JobResult(job_id="j", payload=b"hi", attempt=1)))
    assert result == {"job_id": "j", "payload": "aGk=", "attempt": 1, "fencing_token": "0"}
    job = json.loads(message_json(_job()))
    assert job["state"] == "JOB_STATE_SUCCEEDED"


class _FakeRpcError(grpc.RpcError):
    """What a failed unary call raises: a grpc.Call with code, details and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, message: str, details: list | None = None) -> None:
        self._code, self._message = code, message
        status = status_pb2.Status(code=code.value[0], message=message, details=[_pack(d) for d in details or []])
        self._trailing = (("grpc-status-details-bin", status.SerializeToString()),) if details else ()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self):
        return self._trailing


def _pack(message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def test_invalid_argument_shows_each_field_violation_and_exits_2() -> None:
    error = _FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "kind: bad; priority: out of range",
        [
            error_details_pb2.ErrorInfo(reason="INVALID_ARGUMENT", domain="jobs.v1"),
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field="kind", description="bad"),
                    error_details_pb2.BadRequest.FieldViolation(field="priority", description="out of range"),
                ]
            ),
        ],
    )
    failure = describe(error)
    assert failure.exit_code == 2
    # The API's message is the violations joined: shown once, one a line, not again on the first.
    assert failure.as_text().splitlines() == [
        "error: INVALID_ARGUMENT",
        "  kind: bad",
        "  priority: out of range",
    ]
    assert failure.as_dict()["error"]["field_violations"][1] == {"field": "priority", "description": "out of range"}
    assert failure.as_dict()["error"]["message"] == "kind: bad; priority: out of range"


def test_a_message_that_says_more_than_the_violations_is_kept() -> None:
    violation = error_details_pb2.BadRequest.FieldViolation(field="kind", description="bad")
    error = _FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "the batch is refused",
        [error_details_pb2.BadRequest(field_violations=[violation])],
    )
    assert describe(error).as_text().splitlines() == ["error: INVALID_ARGUMENT: the batch is refused", "  kind: bad"]


def _invalid(*fields: str) -> _FakeRpcError:
    violations = [error_details_pb2.BadRequest.FieldViolation(field=f, description="bad") for f in fields]
    message = "; ".join(f"{f}: bad" for f in fields)
    return _FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT, message, [error_details_pb2.BadRequest(field_violations=violations)]
    )


@pytest.mark.parametrize(
    ("fields", "exit_code"),
    [(["job_id"], 3), (["job_id", "reason"], 2), (["depends_on[0]"], 2), (["kind"], 2)],
)
def test_a_malformed_job_id_exits_like_a_job_that_is_not_there(fields: list[str], exit_code: int) -> None:
    assert describe(_invalid(*fields)).exit_code == exit_code


def test_reason_and_retry_delay_are_shown() -> None:
    delay = duration_pb2.Duration(seconds=2, nanos=500_000_000)
    error = _FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "over quota",
        [error_details_pb2.ErrorInfo(reason="TENANT_RATE"), error_details_pb2.RetryInfo(retry_delay=delay)],
    )
    failure = describe(error)
    assert failure.exit_code == 1
    assert failure.as_text() == "error: RESOURCE_EXHAUSTED: over quota (reason TENANT_RATE)\n  retry after 2.5s"


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [
        (grpc.StatusCode.NOT_FOUND, 3),
        (grpc.StatusCode.FAILED_PRECONDITION, 4),
        (grpc.StatusCode.UNAVAILABLE, 5),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 5),
        (grpc.StatusCode.ALREADY_EXISTS, 1),
        (grpc.StatusCode.UNAUTHENTICATED, 1),
        (grpc.StatusCode.INTERNAL, 1),
    ],
)
def test_exit_code_follows_the_status_code(code: grpc.StatusCode, exit_code: int) -> None:
    failure = describe(_FakeRpcError(code, "message"))
    assert (failure.exit_code, failure.as_text()) == (exit_code, f"error: {code.name}: message")


def test_details_that_contradict_the_status_line_are_ignored() -> None:
    error = _FakeRpcError(grpc.StatusCode.NOT_FOUND, "no such job", [error_details_pb2.ErrorInfo(reason="X")])
    error._message = "something else"
    assert describe(error).as_text() == "error: NOT_FOUND: something else"


def test_lifecycle_commands_parse() -> None:
    assert _parse("watch", "j", "--after-sequence", "4", "--max-wait", "2").after_sequence == 4
    assert _parse("cancel", "j", "--reason", "r").reason == "r"
    retry = _parse("retry", "j", "--accept-duplicate-risk")
    assert (retry.accept_duplicate_risk, retry.reason, retry.clear_checkpoints) == (True, "", False)
    assert _parse("retry", "j", "--clear-checkpoints").clear_checkpoints
    assert _parse("events", "j").job_id == "j"
    assert _parse("dev").command == "dev"


def test_transition_lines_say_what_a_person_needs_next() -> None:
    waiting = _job(state=jobs_pb2.JOB_STATE_RETRY_WAIT, sequence=3, attempts=1, max_attempts=3)
    waiting.run_after.CopyFrom(timestamp_pb2.Timestamp(seconds=1_700_000_060))
    waiting.last_error.CopyFrom(jobs_pb2.JobError(category=jobs_pb2.ERROR_CATEGORY_RETRYABLE, message="timeout"))
    assert transition_line(waiting, 61.25) == (
        "  1:01.2  #3    RETRY_WAIT       attempt 1 of 3  next attempt at 2023-11-14T22:14:20Z"
        "  last error RETRYABLE: timeout"
    )
    running = _job(state=jobs_pb2.JOB_STATE_RUNNING, cancel_requested=True)
    assert transition_line(running, 0).endswith("cancel requested")
    # A later attempt's RUNNING line is not about the earlier attempt's error.
    running.last_error.CopyFrom(waiting.last_error)
    assert "last error" not in transition_line(running, 0)


def test_events_table_has_one_row_per_transition() -> None:
    events = [
        jobs_pb2.JobEvent(sequence=1, to_state=jobs_pb2.JOB_STATE_PENDING, actor="tenant:acme"),
        jobs_pb2.JobEvent(
            sequence=2, from_state=jobs_pb2.JOB_STATE_PENDING, to_state=jobs_pb2.JOB_STATE_RUNNING,
            attempt=1, fencing_token=7, actor="worker:w1", reason="claimed",
        ),
    ]  # fmt: skip
    lines = events_table(events).splitlines()
    assert lines[0].split() == ["SEQ", "AT", "FROM", "TO", "ATTEMPT", "FENCING", "ACTOR", "REASON"]
    assert lines[1].split() == ["1", "-", "-", "PENDING", "0", "0", "tenant:acme"]
    assert lines[2].split() == ["2", "-", "PENDING", "RUNNING", "1", "7", "worker:w1", "claimed"]


NO_DEADLINE_SECONDS = 365 * 24 * 3600.0


class _ScriptedJobService:
    """A JobService on loopback whose WatchJob streams are scripted: each call sends the next script's
    jobs, then ends with its status code (None: ends cleanly). GetJobResult answers b"done". It records
    each WatchJob's after_sequence and deadline (None: no deadline)."""

    def __init__(self, scripts: list[tuple[list[jobs_pb2.Job], grpc.StatusCode | None]]) -> None:
        self._scripts = scripts
        self.after_sequences: list[int] = []
        self.watch_deadlines: list[float | None] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "WatchJob": grpc.unary_stream_rpc_method_handler(
                self._watch,
                request_deserializer=jobs_pb2.WatchJobRequest.FromString,
                response_serializer=jobs_pb2.Job.SerializeToString,
            ),
            "GetJobResult": grpc.unary_unary_rpc_method_handler(
                lambda request, context: jobs_pb2.JobResult(job_id=request.job_id, payload=b"done"),
                request_deserializer=jobs_pb2.GetJobResultRequest.FromString,
                response_serializer=jobs_pb2.JobResult.SerializeToString,
            ),
        }
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("jobs.v1.JobService", handlers)])
        self.target = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _watch(self, request: jobs_pb2.WatchJobRequest, context: grpc.ServicerContext):
        self.after_sequences.append(request.after_sequence)
        # gRPC says "no deadline" as an absurdly distant one.
        remaining = context.time_remaining()
        self.watch_deadlines.append(None if remaining is None or remaining > NO_DEADLINE_SECONDS else remaining)
        jobs, code = self._scripts.pop(0)
        yield from jobs
        if code is not None:
            context.abort(code, "scripted")

    @contextlib.contextmanager
    def client(self):
        try:
            with Client(self.target, "token", timeout=5) as client:
                yield client
        finally:
            self._server.stop(grace=None)


def _state(state: jobs_pb2.JobState, sequence: int) -> jobs_pb2.Job:
    return jobs_pb2.Job(job_id="j", state=state, sequence=sequence)


def test_follow_resumes_after_a_dropped_stream_from_the_last_sequence() -> None:
    pending, running = _state(jobs_pb2.JOB_STATE_PENDING, 1), _state(jobs_pb2.JOB_STATE_RUNNING, 2)
    service = _ScriptedJobService(
        [([pending, running], grpc.StatusCode.UNAVAILABLE), ([_state(jobs_pb2.JOB_STATE_SUCCEEDED, 3)], None)]
    )
    with service.client() as client:
        assert [job.sequence for job in follow(client, "j")] == [1, 2, 3]
    assert service.after_sequences == [0, 2]


def test_follow_stops_at_outcome_unknown_and_does_not_retry_a_refusal() -> None:
    unknown, later = _state(jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN, 4), _state(jobs_pb2.JOB_STATE_PENDING, 5)
    service = _ScriptedJobService([([unknown, later], None), ([], grpc.StatusCode.NOT_FOUND)])
    with service.client() as client:
        assert [job.sequence for job in follow(client, "j")] == [4]
        with pytest.raises(NotFound):
            list(follow(client, "j"))
    assert service.after_sequences == [0, 0]


def test_follow_gives_up_after_failing_for_the_resume_window(monkeypatch) -> None:
    monkeypatch.setattr("durable_jobs.client.WATCH_RESUME_SECONDS_MAX", 1.0)
    service = _ScriptedJobService([([], grpc.StatusCode.UNAVAILABLE) for _ in range(50)])
    with service.client() as client, pytest.raises(Unavailable):
        list(follow(client, "j"))
    assert 2 <= len(service.after_sequences) < 50, "resumed, then gave up"


def test_each_settled_state_has_its_exit_code() -> None:
    assert EXIT_BY_SETTLED_STATE == {
        jobs_pb2.JOB_STATE_SUCCEEDED: 0,
        jobs_pb2.JOB_STATE_FAILED: 6,
        jobs_pb2.JOB_STATE_CANCELLED: 7,
        jobs_pb2.JOB_STATE_SUPERSEDED: 7,
        jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN: 8,
    }


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_line_redraws_in_place_and_clears_itself() -> None:
    out = _Terminal()
    ticks = iter(range(1000))
    with StatusLine(out, enabled=True, clock=lambda: float(next(ticks))) as status:
        status.transition(_state(jobs_pb2.JOB_STATE_RUNNING, 2))
        deadline = time.monotonic() + 5
        while "RUNNING for" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    text = out.getvalue()
    assert "#2" in text and "\r\033[K" in text and "RUNNING for" in text
    assert text.endswith("\r\033[K")


def test_status_line_draws_nothing_but_transitions_off_a_terminal() -> None:
    out = io.StringIO()
    with StatusLine(out, enabled=False) as status:
        status.transition(_state(jobs_pb2.JOB_STATE_PENDING, 1))
    assert "\r" not in out.getvalue() and out.getvalue().count("\n") == 1


def test_dev_runs_the_make_run_script_in_place_of_jobsctl() -> None:
    calls = []
    assert run_dev(io.StringIO(), exec_program=lambda path, argv: calls.append((path, argv))) == 2
    ((path, argv),) = calls
    assert path == sys.executable
    assert argv == [sys.executable, str(REPO_ROOT / "scripts" / "dev_stack.py")]
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "$(VENV_PYTHON) scripts/dev_stack.py" in makefile, "`jobsctl dev` and `make run` run the same script"


def test_dev_without_a_source_checkout_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("jobsctl.dev.DEV_STACK_SCRIPT", tmp_path / "absent.py")
    err = io.StringIO()
    assert run_dev(err, exec_program=lambda *_: pytest.fail("must not exec")) == 2
    assert "source checkout" in err.getvalue()


DOCUMENTED_IN = (
    "README.md",
    "docs/RUNBOOK.md",
    "docs/GUARANTEES.md",
    "docs/SCALING.md",
    "docs/ARCHITECTURE.md",
    "docs/OPERATORS.md",
)


def _code_snippets(text: str) -> list[str]:
    """Lines of fenced code blocks (shell comments cut off) and inline code spans elsewhere."""
    snippets, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            snippets.append(re.split(r"\s#\s", line, maxsplit=1)[0])
        else:
            snippets += re.findall(r"`([^`]+)`", line)
    return snippets


def _documented_command_lines() -> list[tuple[str, list[str]]]:
    """Every `jobsctl ...` command line in the docs' code, cut at the end of its shell command."""
    found = []
    for name in DOCUMENTED_IN:
        for snippet in _code_snippets((REPO_ROOT / name).read_text()):
            for match in re.finditer(r"jobsctl((?: [^|;&)]*)?)", snippet):
                words = shlex.split(match.group(1).rstrip(" \\"))
                if words:
                    found.append((name, words))
    return found


def test_every_jobsctl_command_in_the_docs_parses() -> None:
    commands = _documented_command_lines()
    assert {words[0] for _, words in commands if not words[0].startswith("-")} >= {
        "submit", "get", "result", "list", "watch", "events", "cancel", "retry", "dev",
    }  # fmt: skip
    names = set(COMMANDS) | set(ADMIN_COMMANDS) | {"dev"}
    for name, words in commands:
        if len(words) == 1 and words[0] in names:  # prose naming a command, like `jobsctl get`
            continue
        try:
            _parse(*words)
        except SystemExit:
            pytest.fail(f"{name}: `jobsctl {' '.join(words)}` does not parse")


_CITED_DOC = re.compile(r"\bdocs/[A-Za-z_]+\.md\b")
_NOT_SOURCES = {".git", ".venv", ".dev", "node_modules", "build", "dist"}


def test_every_docs_page_a_file_cites_exists() -> None:
    cited: dict[str, set[str]] = {}
    for path in REPO_ROOT.rglob("*"):
        if not path.is_file() or _NOT_SOURCES & set(path.relative_to(REPO_ROOT).parts):
            continue
        if path.suffix not in {".md", ".py", ".proto", ".yaml", ".yml", ".toml", ".sh", ""}:
            continue
        for page in _CITED_DOC.findall(path.read_text(errors="replace")):
            cited.setdefault(page, set()).add(str(path.relative_to(REPO_ROOT)))
    assert "Dockerfile" in cited.get("docs/ARCHITECTURE.md", set())
    missing = {page: sorted(files) for page, files in cited.items() if not (REPO_ROOT / page).is_file()}
    assert not missing, f"cited but absent: {missing}"


def _section(path: str, heading: str) -> str:
    text = (REPO_ROOT / path).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return " ".join(text[start : end if end != -1 else None].split())


def test_the_runbook_rotates_tokens_with_the_sighup_reload_the_api_does() -> None:
    server = (REPO_ROOT / "api_service" / "server.py").read_text()
    assert "add_signal_handler(signal.SIGHUP" in server, "the API reloads its principals on SIGHUP"
    rotation = _section("docs/RUNBOOK.md", "## Rotating tokens")
    assert "SIGHUP" in rotation and "kill -HUP" in rotation
    assert "reads it when it starts." not in rotation and "as soon as the API pods have restarted" not in rotation


def test_docs_say_a_running_job_is_cancelled_by_notification_not_at_its_next_heartbeat() -> None:
    proto = (REPO_ROOT / "proto" / "jobs" / "v1" / "jobs.proto").read_text()
    cancel_comment = proto[: proto.index("rpc CancelJob(")].rsplit("rpc ", 1)[1]
    guarantees = _section("docs/GUARANTEES.md", "## Reading state and results")
    readme_row = next(line for line in (REPO_ROOT / "README.md").read_text().splitlines() if "`cancel JOB_ID" in line)
    for text in (cancel_comment, guarantees, readme_row):
        text = " ".join(text.split())
        assert "notif" in text, text
        assert "stops at its next heartbeat" not in text and "at its worker's next heartbeat" not in text, text


@pytest.mark.parametrize("member", ["no-equals-sign", "=echo:x", "text=:payload"])
def test_a_malformed_set_member_is_a_usage_error_before_any_call(member: str) -> None:
    err = io.StringIO()
    console = Console(io.BytesIO(), io.StringIO(), io.BytesIO(), err)
    args = ["--target", "127.0.0.1:1", "--token", "t", "sets", "submit", "lesson", "1", "--member", member]
    assert main(args, console) == 2
    assert "--member needs" in err.getvalue()


def test_submit_carries_the_sequence_singleton_and_debounce_keys() -> None:
    request = submit_request(
        _parse("submit", "echo", "--sequence-key", "doc-7", "--singleton-key", "nightly"), io.BytesIO()
    )
    assert (request.sequence_key, request.singleton_key, request.HasField("debounce")) == ("doc-7", "nightly", False)
    debounced = submit_request(
        _parse("submit", "echo", "--debounce", "doc-7", "--quiet-seconds", "30", "--max-wait-seconds", "300"),
        io.BytesIO(),
    )
    assert debounced.debounce == jobs_pb2.Debounce(key="doc-7", quiet_seconds=30, max_wait_seconds=300)
    with pytest.raises(UsageError):
        submit_request(_parse("submit", "echo", "--debounce", "doc-7"), io.BytesIO())
