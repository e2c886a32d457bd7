"""The W3C Trace Context rules a submission's traceparent and tracestate are held to."""

from __future__ import annotations

import pytest

from api_service.convert import trace_context_from_metadata
from shared.domain.trace_context import (
    TRACESTATE_LENGTH_MAX,
    TRACESTATE_MEMBERS_MAX,
    TraceContext,
    parse_traceparent,
    parse_tracestate,
)

pytestmark = pytest.mark.timeout(10)

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (VALID, VALID),
        (f" {VALID}\t", VALID),  # optional whitespace around a header value
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        ),
        # A later version: its first four fields are read, and the context goes on as version 00.
        ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds", VALID),
        ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", VALID),
    ],
)
def test_a_valid_traceparent_is_kept_in_its_version_00_form(header: str, expected: str) -> None:
    assert parse_traceparent(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has four fields
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper-case hex
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # short flags
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  # a later field without its dash
    ],
)
def test_a_malformed_traceparent_is_ignored(header: str) -> None:
    assert parse_traceparent(header) is None


def test_tracestate_headers_join_in_order_and_drop_empty_members() -> None:
    assert (
        parse_tracestate(["congo=t61rcWkgMzE", " rojo=00f067aa0ba902b7 ,,"])
        == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    )
    assert parse_tracestate(["tenant@vendor=a value with spaces"]) == "tenant@vendor=a value with spaces"
    assert parse_tracestate([]) is None and parse_tracestate([" , "]) is None


@pytest.mark.parametrize(
    "header",
    ["no-equals-sign", "Upper=1", "a=1,a=2", "a=", "a=x,b=co,mma=", "a=with=equals", "a=é"],
)
def test_a_malformed_tracestate_is_dropped_whole(header: str) -> None:
    assert parse_tracestate([header]) is None


def test_a_long_tracestate_loses_its_long_members_first_then_its_last() -> None:
    long_member = "big=" + "x" * 200
    short = [f"k{i}={'v' * 20}" for i in range(30)]
    kept = parse_tracestate([",".join(short[:2] + [long_member] + short[2:])])
    assert kept is not None and len(kept) <= TRACESTATE_LENGTH_MAX
    assert "big=" not in kept
    members = kept.split(",")
    assert members == short[: len(members)], "members are cut from the end, in order"
    many = ",".join(f"k{i}=v" for i in range(TRACESTATE_MEMBERS_MAX + 5))
    capped = parse_tracestate([many])
    assert capped is not None and len(capped.split(",")) == TRACESTATE_MEMBERS_MAX


def test_metadata_gives_the_context_only_for_exactly_one_valid_traceparent() -> None:
    auth = ("authorization", "Bearer t")
    assert trace_context_from_metadata(
        [auth, ("traceparent", VALID), ("tracestate", "a=1"), ("tracestate", "b=2")]
    ) == (TraceContext(VALID, "a=1,b=2"))
    assert trace_context_from_metadata([auth, ("traceparent", VALID)]) == TraceContext(VALID, None)
    assert trace_context_from_metadata([("traceparent", VALID), ("traceparent", VALID)]) is None
    assert trace_context_from_metadata([("traceparent", "junk"), ("tracestate", "a=1")]) is None
    assert trace_context_from_metadata([auth]) is None
    assert trace_context_from_metadata(None) is None
    # Binary metadata (keys ending in -bin) arrives as bytes and is never a traceparent.
    assert trace_context_from_metadata([("traceparent-bin", b"\x00")]) is None
