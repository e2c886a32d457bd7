"""jobsctl without a server: argument parsing, request building, output formatting, error display."""

from __future__ import annotations

import io
import json

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from jobs.v1 import jobs_pb2
from jobsctl.__main__ import main
from jobsctl.arguments import UsageError, build_parser, list_request, submit_request
from jobsctl.commands import Console
from jobsctl.rendering import job_text, jobs_table, message_json, parse_state
from jobsctl.rpc_errors import describe

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
    args = _parse(
        "submit", "echo", "--payload", "héllo", "--idempotency-key", "k1", "--priority", "7",
        "--max-attempts", "4", "--label", "team=core", "--label", "env=a=b",
        "--resource-key", "doc-1", "--resource-version", "3",
    )  # fmt: skip
    request = submit_request(args, io.BytesIO())
    assert request == jobs_pb2.SubmitJobRequest(
        kind="echo",
        payload="héllo".encode(),
        idempotency_key="k1",
        priority=7,
        max_attempts=4,
        labels={"team": "core", "env": "a=b"},
        resource_key="doc-1",
        resource_version=3,
    )


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
    assert failure.as_text().splitlines() == [
        "error: INVALID_ARGUMENT: kind: bad; priority: out of range",
        "  kind: bad",
        "  priority: out of range",
    ]
    assert failure.as_dict()["error"]["field_violations"][1] == {"field": "priority", "description": "out of range"}


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

