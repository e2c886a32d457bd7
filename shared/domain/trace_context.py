"""W3C Trace Context (https://www.w3.org/TR/trace-context/) as a submission carries it.

The service stores the caller's `traceparent` and `tracestate` with the job and hands them to the
worker, which continues the trace. It never fails a submission over them: like any W3C receiver it
ignores a malformed `traceparent` (the job then has no trace context) and drops a `tracestate` it
cannot parse, so an instrumentation bug in a caller cannot make its jobs be refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
# The spec asks receivers to keep at least 512 characters and at most 32 members of tracestate.
TRACESTATE_LENGTH_MAX = 512
TRACESTATE_MEMBERS_MAX = 32
# Truncating, members longer than this go first (the spec's rule), then members from the end.
TRACESTATE_LONG_MEMBER = 128

# version-traceid-parentid-flags, lowercase hex; a later version may append fields after a dash.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
_VERSION_INVALID = "ff"
_VERSION_CURRENT = "00"
_MEMBER = re.compile(
    r"(?P<key>[a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=(?P<value>[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e])"
)


@dataclass(frozen=True)
class TraceContext:
    """A valid `traceparent` (version 00 form) and the caller's `tracestate`, if it was valid."""

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent.split("-")[1]


def parse_traceparent(value: str) -> str | None:
    """The header in its version-00 form, or None when it is not a valid traceparent."""
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == _VERSION_INVALID or (version == _VERSION_CURRENT and rest is not None):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    # A later version's first four fields mean what version 00's do; forwarding, one writes 00.
    return f"{_VERSION_CURRENT}-{trace_id}-{parent_id}-{flags}"


def parse_tracestate(values: Sequence[str]) -> str | None:
    """The members of every `tracestate` header, in order, or None when any is malformed (or there is
    none); cut to the spec's bounds when longer."""
    members = [m.strip(" \t") for value in values for m in value.split(",")]
    members = [m for m in members if m]
    if not members:
        return None
    keys = []
    for member in members:
        match = _MEMBER.fullmatch(member)
        if match is None:
            return None
        keys.append(match["key"])
    if len(set(keys)) != len(keys):
        return None
    while len(members) > TRACESTATE_MEMBERS_MAX or len(",".join(members)) > TRACESTATE_LENGTH_MAX:
        long_member = next((i for i, m in enumerate(members) if len(m) > TRACESTATE_LONG_MEMBER), None)
        members.pop(long_member if long_member is not None else -1)
    return ",".join(members) or None


def trace_context_from_headers(headers: Sequence[tuple[str, str]]) -> TraceContext | None:
    """From request headers (gRPC metadata) as OpenTelemetry's propagator writes them: one traceparent,
    any number of tracestate. Two traceparent headers are as invalid as a malformed one."""
    parents = [value for key, value in headers if key.lower() == TRACEPARENT_HEADER]
    if len(parents) != 1:
        return None
    traceparent = parse_traceparent(parents[0])
    if traceparent is None:
        return None
    states = [value for key, value in headers if key.lower() == TRACESTATE_HEADER]
    return TraceContext(traceparent, parse_tracestate(states))
