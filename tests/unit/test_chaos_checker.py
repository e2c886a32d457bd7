"""The chaos checker on histories written by hand: each check names the violation it exists for, points at
the lines that show it, and stays silent on the same story told right. No processes, no database: the
checker is a function of the history file alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import Report, check_history
from chaos.history import read_history

pytestmark = pytest.mark.timeout(30)

LEASE = 2.0


class Story:
    """A history line by line: what the clients, the handlers, the faults and the database said."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        self.t = 1_000.0
        self.calls = 0
        self.add(
            "run.start",
            src="runner",
            seed=1,
            seconds=1.0,
            lease_seconds=LEASE,
            heartbeat_seconds=LEASE / 3,
            cancel_slack_seconds=1.0,
            faults=[],
            tenants=["acme", "globex"],
            limits={"kind:chaos.limited": 2},
        )

    def add(self, event: str, src: str = "test", **fields: Any) -> int:
        self.t += 0.1
        self.lines.append({"t": fields.pop("t", self.t), "src": src, "ev": event, **fields})
        return len(self.lines)

    def call(
        self, op: str, tenant: str = "acme", code: str = "OK", answer: dict[str, Any] | None = None, **fields: Any
    ) -> str:
        self.calls += 1
        call_id = f"c{self.calls}"
        self.add("call", src=f"client:{tenant}", id=call_id, op=op, tenant=tenant, **fields)
        self.add("answer", src=f"client:{tenant}", id=call_id, code=code, reason="", **(answer or {}))
        return call_id

    def submit(
        self, sub: str, job_id: str, tenant: str = "acme", kind: str = "chaos.quick", code: str = "OK", **item: Any
    ) -> None:
        entry = {
            "sub": sub,
            "key": f"key-{sub}",
            "kind": kind,
            "resource_key": None,
            "version": None,
            "depends_on": [],
            **item,
        }
        answer = {"jobs": [[job_id, True]]} if code == "OK" else {}
        self.call("submit", tenant, code, answer, items=[entry], batch=False, resubmission=0)

    def job(
        self,
        job_id: str,
        sub: str,
        tenant: str = "acme",
        kind: str = "chaos.quick",
        state: str = "succeeded",
        token: int = 1,
        **more: Any,
    ) -> None:
        row = {
            "job_id": job_id,
            "tenant": tenant,
            "kind": kind,
            "state": state,
            "attempts": token,
            "max_attempts": 10,
            "fencing_token": token,
            "idempotency_key": f"key-{sub}",
            "resource_key": None,
            "resource_version": None,
            "depends_on": [],
            "labels": {"chaos_sub": sub},
            "cancel_requested": False,
            "limit_keys": [],
            "lease_expires_at": None,
            "run_after": self.t,
            **more,
        }
        self.add("db.job", src="database", **row)

    def event(
        self,
        job_id: str,
        sequence: int,
        source: str | None,
        target: str,
        token: int = 1,
        actor: str = "worker:w1",
        reason: str = "",
        tenant: str = "acme",
    ) -> float:
        self.add(
            "db.event",
            src="database",
            job_id=job_id,
            sequence=sequence,
            from_state=source,
            to_state=target,
            attempt=token,
            fencing_token=token,
            actor=actor,
            reason=reason,
            at=self.t + 0.001,
        )
        return self.t

    def attempt(
        self, job_id: str, token: int, tenant: str = "acme", worker: str = "w1", outcome: str = "returned"
    ) -> str:
        result = json.dumps(
            {"attempt": token, "job": job_id, "nonce": f"n{token}", "token": token},
            separators=(",", ":"),
            sort_keys=True,
        )
        src = f"handler:{worker}"
        self.add(
            "handler.start",
            src=src,
            job_id=job_id,
            token=token,
            attempt=token,
            tenant=tenant,
            kind="chaos.quick",
            pid=1,
        )
        self.add(
            "handler.end",
            src=src,
            job_id=job_id,
            token=token,
            attempt=token,
            outcome=outcome,
            **({"result": result} if outcome == "returned" else {}),
        )
        return result

    def result(self, job_id: str, payload: str, token: int = 1, tenant: str = "acme") -> None:
        self.add(
            "db.result",
            src="database",
            job_id=job_id,
            tenant=tenant,
            payload=payload,
            attempt=token,
            fencing_token=token,
            at=self.t,
        )

    def succeeded_job(self, job_id: str, sub: str, tenant: str = "acme", kind: str = "chaos.quick") -> None:
        """Submitted, claimed, run, completed: the plain story."""
        self.submit(sub, job_id, tenant, kind)
        self.event(job_id, 1, None, "pending", token=0, actor=f"tenant:{tenant}", reason="submitted")
        self.event(job_id, 2, "pending", "running", reason="claimed")
        payload = self.attempt(job_id, 1, tenant)
        self.event(job_id, 3, "running", "succeeded", reason="completed")
        self.job(job_id, sub, tenant, kind)
        self.result(job_id, payload, tenant=tenant)

    def check(self, settled: bool = True) -> Report:
        self.add("run.settled", src="runner", settled=settled, unsettled=0 if settled else 1)
        self.add("faults.statement", src="runner", counts={})
        self.add("run.end", src="runner")
        self.path.write_text("".join(json.dumps(line) + "\n" for line in self.lines))
        return check_history(read_history(self.path))


def _named(report: Report) -> set[str]:
    return {v.check for v in report.violations}


def test_a_story_told_right_has_no_violation(tmp_path: Path) -> None:
    story = Story(tmp_path / "h.jsonl")
    story.succeeded_job("j1", "s1")
    story.succeeded_job("j2", "s2", tenant="globex")
    report = story.check()
    assert report.violations == []
    assert report.operations == 2


def _lost(story: Story) -> None:
    story.submit("s1", "j1")


def _duplicate(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.job("j2", "s1", state="pending", token=0)
    story.event("j2", 1, None, "pending", token=0, actor="tenant:acme")


def _refused_but_stored(story: Story) -> None:
    story.submit("s1", "j1", code="INVALID_ARGUMENT")
    story.job("j1", "s1", state="pending", token=0)
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")


def _stale_result(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    stale = story.attempt("j1", 1)
    story.event("j1", 3, "running", "retry_wait", actor="system", reason="lease expired")
    story.event("j1", 4, "retry_wait", "running", token=2)
    story.attempt("j1", 2, outcome="stopped")
    story.event("j1", 5, "running", "succeeded", token=2)
    story.job("j1", "s1", token=2)
    story.result("j1", stale, token=2)


def _result_no_handler_returned(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.lines = [line for line in story.lines if line["ev"] != "handler.end"]


def _two_successes(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.event("j1", 4, "succeeded", "succeeded")
    story.result("j1", "other")


def _stale_write(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    story.event("j1", 3, "running", "retry_wait", actor="system", reason="lease expired")
    claimed = story.event("j1", 4, "retry_wait", "running", token=2)
    story.add(
        "db.checkpoint", src="database", job_id="j1", stage="stage-0", attempt=1, fencing_token=1, at=claimed + 1.0
    )
    payload = story.attempt("j1", 2)
    story.event("j1", 5, "running", "succeeded", token=2)
    story.job("j1", "s1", token=2)
    story.result("j1", payload, token=2)


def _intent_story(story: Story, consent: bool) -> None:
    story.submit("s1", "j1", kind="chaos.intent")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    story.add(
        "handler.start", src="handler:w1", job_id="j1", token=1, attempt=1, tenant="acme", kind="chaos.intent", pid=1
    )
    story.add("handler.intent", src="handler:w1", job_id="j1", token=1, attempt=1, step="call", ok=True)
    story.add(
        "db.receipt",
        src="database",
        job_id="j1",
        attempt=1,
        step="call",
        fencing_token=1,
        recorded_at=story.t,
        confirmed_at=None,
    )
    if consent:
        story.event("j1", 3, "running", "outcome_unknown", actor="system", reason="lease expired")
        story.event(
            "j1",
            4,
            "outcome_unknown",
            "pending",
            actor="tenant:acme",
            reason="manual retry by tenant:acme: checked (duplicate risk accepted)",
        )
        story.event("j1", 5, "pending", "running", token=2)
        sequence = 6
    else:
        story.event("j1", 3, "running", "retry_wait", actor="system", reason="lease expired")
        story.event("j1", 4, "retry_wait", "running", token=2)
        sequence = 5
    payload = story.attempt("j1", 2)
    story.event("j1", sequence, "running", "succeeded", token=2)
    story.job("j1", "s1", kind="chaos.intent", token=2)
    story.result("j1", payload, token=2)


def _blind_retry(story: Story) -> None:
    _intent_story(story, consent=False)


def _undocumented(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.event("j1", 4, "succeeded", "running", token=2)


def _automatic_reopen(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    story.attempt("j1", 1, outcome="raised")
    story.event("j1", 3, "running", "failed")
    story.event("j1", 4, "failed", "pending", actor="worker:w1", reason="attempt failed")
    story.job("j1", "s1", state="pending")


def _success_after_cancel(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    story.event("j1", 3, "running", "running", actor="tenant:acme", reason="cancel requested")
    story.call(
        "cancel",
        answer={"job": {"job_id": "j1", "state": "running", "sequence": 3, "cancel_requested": True}},
        job_id="j1",
        foreign=False,
    )
    payload = story.attempt("j1", 1)
    story.event("j1", 4, "running", "succeeded", reason="completed")
    story.job("j1", "s1", cancel_requested=True)
    story.result("j1", payload)


def _read_inconsistent(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.call(
        "get",
        answer={"job": {"job_id": "j1", "state": "pending", "sequence": 2, "cancel_requested": False}},
        job_id="j1",
        foreign=False,
    )


def _tenant_wall(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.succeeded_job("j2", "s2", tenant="globex")
    story.call("list", answer={"jobs": [["j1", 3, "succeeded"], ["j2", 3, "succeeded"]]})
    story.call("cancel", tenant="acme", code="FAILED_PRECONDITION", job_id="j2", foreign=True)


def _limit_exceeded(story: Story) -> None:
    for number in (1, 2, 3):
        story.submit(f"s{number}", f"j{number}", kind="chaos.limited")
        story.event(f"j{number}", 1, None, "pending", token=0, actor="tenant:acme")
    for number in (1, 2, 3):
        story.event(f"j{number}", 2, "pending", "running")
    for number in (1, 2, 3):
        payload = story.attempt(f"j{number}", 1)
        story.event(f"j{number}", 3, "running", "succeeded")
        story.job(f"j{number}", f"s{number}", kind="chaos.limited")
        story.result(f"j{number}", payload)


def _cancel_story(story: Story, paused: bool) -> None:
    story.submit("s1", "j1", kind="chaos.limited")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    story.add(
        "handler.start", src="handler:w1", job_id="j1", token=1, attempt=1, tenant="acme", kind="chaos.limited", pid=1
    )
    story.event("j1", 3, "running", "running", actor="tenant:acme", reason="cancel requested")
    story.call(
        "cancel",
        answer={"job": {"job_id": "j1", "state": "running", "sequence": 3, "cancel_requested": True}},
        job_id="j1",
        foreign=False,
    )
    if paused:
        story.add("fault", src="nemesis", id=1, kind="lease_pause", phase="start", target="w1")
        story.add("fault", src="nemesis", id=1, kind="lease_pause", phase="end", target="w1", t=story.t + 20)
    story.add(
        "handler.end", src="handler:w1", job_id="j1", token=1, attempt=1, outcome="returned", result="x", t=story.t + 21
    )
    story.t += 21
    story.event("j1", 4, "running", "cancelled", reason="cancelled; result discarded")
    story.job("j1", "s1", kind="chaos.limited", state="cancelled", cancel_requested=True)


def _cancel_ignored(story: Story) -> None:
    _cancel_story(story, paused=False)


def _unsettled(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.job("j1", "s1", state="pending", token=0)
    story.succeeded_job("j2", "s2")
    story.submit("s3", "j3", depends_on=["j2"])
    story.event("j3", 1, None, "blocked", token=0, actor="tenant:acme")
    story.job("j3", "s3", state="blocked", token=0, depends_on=["j2"])


def _dependency_not_done(story: Story) -> None:
    story.submit("s1", "j1")
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.submit("s2", "j2", depends_on=["j1"])
    story.event("j2", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j2", 2, "pending", "running")
    payload = story.attempt("j2", 1)
    story.event("j2", 3, "running", "succeeded")
    story.job("j2", "s2", depends_on=["j1"])
    story.result("j2", payload)
    story.event("j1", 2, "pending", "running")
    first = story.attempt("j1", 1)
    story.event("j1", 3, "running", "succeeded")
    story.job("j1", "s1")
    story.result("j1", first)


def _stale_latest(story: Story) -> None:
    story.submit("s1", "j1", resource_key="doc", version=1)
    story.event("j1", 1, None, "pending", token=0, actor="tenant:acme")
    story.event("j1", 2, "pending", "running")
    payload = story.attempt("j1", 1)
    story.event("j1", 3, "running", "succeeded")
    story.job("j1", "s1", resource_key="doc", resource_version=1)
    story.result("j1", payload)
    story.submit("s2", "j2", resource_key="doc", version=2)
    story.event("j2", 1, None, "pending", token=0, actor="tenant:acme")
    story.job("j2", "s2", state="pending", token=0, resource_key="doc", resource_version=2)
    story.call("latest_result", answer={"result_job_id": "j1", "version": 1, "payload": payload}, resource_key="doc")


def _claimed_while_paused(story: Story) -> None:
    story.call("pause_kind", tenant="", answer={"paused": True}, kind="chaos.pausable")
    story.t += 15
    story.succeeded_job("j1", "s1", kind="chaos.pausable")
    story.call("resume_kind", tenant="", answer={"paused": False}, kind="chaos.pausable")


def _process_exited(story: Story) -> None:
    story.succeeded_job("j1", "s1")
    story.add("process.exited", src="runner", target="w2", code=1, log="w2.log")


CASES: dict[str, tuple[Callable[[Story], None], set[str]]] = {
    "acknowledged-lost": (_lost, {"acknowledged_lost"}),
    "duplicate": (_duplicate, {"duplicate_job"}),
    "refused-but-stored": (_refused_but_stored, {"refused_but_stored"}),
    "stale-result": (_stale_result, {"result_from_stale_attempt"}),
    "result-no-handler-returned": (_result_no_handler_returned, {"result_not_from_an_attempt"}),
    "two-successes": (
        _two_successes,
        {"succeeded_twice", "two_results", "undocumented_transition", "result_not_from_an_attempt"},
    ),
    "stale-write": (_stale_write, {"stale_write"}),
    "blind-retry": (_blind_retry, {"blind_retry"}),
    "undocumented-transition": (_undocumented, {"undocumented_transition"}),
    "automatic-reopen": (_automatic_reopen, {"automatic_reopen"}),
    "success-after-cancel": (_success_after_cancel, {"succeeded_after_cancel"}),
    "read-inconsistent": (_read_inconsistent, {"read_inconsistent"}),
    "tenant-wall": (_tenant_wall, {"tenant_wall"}),
    "limit-exceeded": (_limit_exceeded, {"limit_exceeded"}),
    "cancel-ignored": (_cancel_ignored, {"cancel_ignored"}),
    "unsettled": (_unsettled, {"unsettled"}),
    "dependency-not-done": (_dependency_not_done, {"dependency_not_done"}),
    "stale-latest-result": (_stale_latest, {"stale_latest_result"}),
    "claimed-while-paused": (_claimed_while_paused, {"claimed_while_paused"}),
    "process-exited": (_process_exited, {"process_exited"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_check_names_its_violation(tmp_path: Path, case: str) -> None:
    build, expected = CASES[case]
    story = Story(tmp_path / "h.jsonl")
    build(story)
    report = story.check(settled=case != "unsettled")
    assert _named(report) == expected, report.summary_line()
    assert all(v.lines for v in report.violations if v.check != "process_exited" or v.lines)


@pytest.mark.parametrize(
    "build",
    [lambda s: _intent_story(s, consent=True), lambda s: _cancel_story(s, paused=True)],
    ids=["retry-with-consent", "cancel-while-worker-paused"],
)
def test_the_same_stories_told_right_are_clean(tmp_path: Path, build: Callable[[Story], None]) -> None:
    story = Story(tmp_path / "h.jsonl")
    build(story)
    report = story.check()
    assert report.violations == [], report.summary_line()


def test_a_torn_line_is_counted_never_guessed_at(tmp_path: Path) -> None:
    story = Story(tmp_path / "h.jsonl")
    story.succeeded_job("j1", "s1")
    report = story.check()
    with story.path.open("a") as history:
        history.write('{"t": 1, "src": "handler:w1", "ev": "handler.st')
    again = check_history(read_history(story.path))
    assert report.violations == again.violations == []
    assert again.figures["torn_history_lines"] == 1
