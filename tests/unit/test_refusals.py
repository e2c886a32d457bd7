"""Every refusal the API can give is classified permanent or transient in one table (jobs_outbox/refusals.py),
the docs show exactly that table, and every reason the service raises has its place in it."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import grpc
import pytest

import api_service
import shared
from api_service import error_status
from jobs_outbox.refusals import REFUSALS, Permanence, rule_for
from shared.domain import errors

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
GUARANTEES = REPO / "docs" / "GUARANTEES.md"
_ROW = re.compile(r"^\| `([A-Z_]+)` \| (`([A-Z_]+)`|any other|any) \| (permanent|transient) \| (.+) \|$")
# Reasons given where a refusal is raised, beside those of the error classes.
_REASON_LITERAL = re.compile(r'reason="([A-Z][A-Z_]+)"')
# Codes whose reason decides: each of their reasons needs a row of its own.
_DECIDED_BY_REASON = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS}


def test_every_status_code_but_ok_has_a_rule() -> None:
    for code in grpc.StatusCode:
        if code is not grpc.StatusCode.OK:
            assert rule_for(code).code is code


def test_the_docs_show_exactly_the_table() -> None:
    shown = []
    for line in GUARANTEES.read_text().splitlines():
        match = _ROW.match(line)
        if match:
            shown.append((match[1], match[3], match[4], match[5]))
    assert shown == [(r.code.name, r.reason, r.permanence.value, r.why) for r in REFUSALS]


def _service_reasons() -> set[tuple[grpc.StatusCode, str]]:
    """(code, reason) of every error class of the service, and of every reason given where raised."""
    for package in (shared, api_service):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".console" not in module.name:
                importlib.import_module(module.name)
    found = set()
    pending = [errors.JobsError]
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        found.add((error_status.status_for(_instance(cls)).code, cls.reason))
    for folder in ("shared", "api_service"):
        for path in (REPO / folder).rglob("*.py"):
            found |= {(grpc.StatusCode.FAILED_PRECONDITION, r) for r in _REASON_LITERAL.findall(path.read_text())}
    return found


def _instance(cls: type[errors.JobsError]) -> errors.JobsError:
    if issubclass(cls, errors.InvalidArgument):
        return cls([])
    if issubclass(
        cls, errors.NotFound | errors.LeaseLost | errors.JobCancelled | errors.JobSuperseded | errors.ResourceDeleted
    ):
        return cls()
    return cls("probe")


def test_every_reason_the_service_raises_is_classified() -> None:
    reasons = _service_reasons()
    assert (grpc.StatusCode.FAILED_PRECONDITION, "RESOURCE_DELETED") in reasons
    for code, reason in reasons:
        rule = rule_for(code, reason)
        if code in _DECIDED_BY_REASON and reason not in ("FAILED_PRECONDITION",):
            assert rule.reason == reason, f"{code.name} {reason} has no row of its own in jobs_outbox/refusals.py"


def test_a_deleted_version_is_permanent_and_a_busy_service_transient() -> None:
    assert rule_for(grpc.StatusCode.FAILED_PRECONDITION, "RESOURCE_DELETED").permanence is Permanence.PERMANENT
    assert rule_for(grpc.StatusCode.FAILED_PRECONDITION, "SOMETHING_NEW").permanence is Permanence.PERMANENT
    assert rule_for(grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED").permanence is Permanence.TRANSIENT
    assert rule_for(grpc.StatusCode.UNAVAILABLE).permanence is Permanence.TRANSIENT
