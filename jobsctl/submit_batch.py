"""`jobsctl submit-batch`: each line of a JSON-lines file is one SubmitJobRequest; they go to the API in
chunks, one SubmitJobs call each (all or nothing per chunk), and the ids are printed in file order as
each chunk is accepted, so that a failure part-way leaves on stdout exactly the jobs that exist."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import grpc
from google.protobuf import json_format

from jobs.v1 import jobs_pb2
from jobsctl.arguments import CHUNK_BYTES_MAX, STDIN_MARKER, UsageError
from jobsctl.rendering import message_json_line
from jobsctl.rpc_errors import EXIT_OK, RpcFailure, describe, report

if TYPE_CHECKING:
    from jobsctl.commands import Call, Console

# Bad lines listed before giving up on the file: enough to fix a pattern, not a wall of text.
BAD_LINES_SHOWN_MAX = 10
# Codes after which the chunk may have been committed although the answer never came.
_INDETERMINATE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# The API names a batch item's field `jobs[<index>].<field>`.
_ITEM_FIELD = re.compile(r"jobs\[(\d+)\]\.?")


@dataclass(frozen=True)
class BatchLine:
    number: int  # 1-based, as an editor shows it
    request: jobs_pb2.SubmitJobRequest


def read_batch(source: BinaryIO) -> list[BatchLine]:
    """Every non-blank line parsed; raises UsageError naming the bad lines, before anything is sent."""
    lines, bad = [], []
    for number, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        request = jobs_pb2.SubmitJobRequest()
        try:
            json_format.Parse(raw.decode("utf-8"), request)
        except (UnicodeDecodeError, json_format.ParseError) as exc:
            bad.append(f"line {number}: {' '.join(str(exc).split())}")
            continue
        lines.append(BatchLine(number, request))
    if bad:
        shown = bad[:BAD_LINES_SHOWN_MAX]
        if len(bad) > BAD_LINES_SHOWN_MAX:
            shown.append(f"... and {len(bad) - BAD_LINES_SHOWN_MAX} more")
        raise UsageError("not a SubmitJobRequest in proto JSON (nothing was sent):\n  " + "\n  ".join(shown))
    return lines


def chunked(lines: list[BatchLine], size: int, max_bytes: int = CHUNK_BYTES_MAX) -> Iterator[list[BatchLine]]:
    """Runs of at most `size` lines and `max_bytes` encoded; a line larger than that goes alone."""
    chunk: list[BatchLine] = []
    chunk_bytes = 0
    for line in lines:
        line_bytes = line.request.ByteSize() + 8  # the field tag and length prefix around each item
        if chunk and (len(chunk) == size or chunk_bytes + line_bytes > max_bytes):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(line)
        chunk_bytes += line_bytes
    if chunk:
        yield chunk


def run_submit_batch(call: Call, args: argparse.Namespace, console: Console) -> int:
    lines = _open_and_read(args.path, console.stdin)
    created = found = 0
    for chunk in chunked(lines, args.chunk_size):
        request = jobs_pb2.SubmitJobsRequest(jobs=[line.request for line in chunk])
        try:
            response = call.stub.SubmitJobs(request, timeout=call.timeout, metadata=call.metadata)
        except grpc.RpcError as exc:
            failure = _in_line_numbers(describe(exc), chunk)
            exc.__traceback__ = None  # see watch.follow: a call object in a cycle can hang the exit
            code = report(failure, args.output, console.stderr)
            print(f"jobsctl: {_what_happened(failure, chunk, created + found)}", file=console.stderr)
            return code
        for result in response.results:
            text = message_json_line(result) if args.output == "json" else result.job.job_id
            print(text, file=console.stdout)
            created, found = created + result.created, found + (not result.created)
        console.stdout.flush()
    if args.output == "text":
        earlier = f", {found} already submitted earlier (same idempotency key or input)" if found else ""
        print(f"{created + found} jobs: {created} submitted{earlier}", file=console.stderr)
    return EXIT_OK


def _open_and_read(path: str, stdin: BinaryIO) -> list[BatchLine]:
    if path == STDIN_MARKER:
        return read_batch(stdin)
    try:
        with open(path, "rb") as source:
            return read_batch(source)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _in_line_numbers(failure: RpcFailure, chunk: list[BatchLine]) -> RpcFailure:
    """`jobs[3].kind` means the chunk's fourth item: the person needs the file's line instead."""
    if not failure.field_violations:
        return failure

    def line_of(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"line {chunk[index].number}: " if index < len(chunk) else match.group(0)

    def relabel(field: str) -> str:
        return _ITEM_FIELD.sub(line_of, field, count=1)

    joined = "; ".join(f"{f}: {d}" for f, d in failure.field_violations)
    violations = [(relabel(f).removesuffix(": ") or f, d) for f, d in failure.field_violations]
    message = "; ".join(f"{f}: {d}" for f, d in violations) if failure.message == joined else failure.message
    return dataclasses.replace(failure, message=message, field_violations=violations)


def _what_happened(failure: RpcFailure, chunk: list[BatchLine], accepted: int) -> str:
    lines = f"lines {chunk[0].number}-{chunk[-1].number}"
    before = f"{accepted} jobs of the lines before were submitted (their ids are on stdout)"
    if failure.code in _INDETERMINATE:
        return (
            f"{lines} may or may not have been submitted (the answer was lost); {before}. Running the same "
            "file again is safe for lines with an idempotency_key; a line without one may then run twice"
        )
    return f"{lines} were not submitted, nor any line after them; {before}"
