"""The chaos run (chaos/, docs/CHAOS.md): a short fixed-seed run of the real processes under every kind of
fault finds no violation; and the checker is shown to catch what it claims to, by breaking a guarantee
on purpose in a launcher or a patch that only these tests apply, never reachable in production: a
completion that skips its fence, a resubmission without its idempotency key, a worker that ignores a
cancel. Each break runs beside the same scenario on the intact code, which must come out clean: the
check fires for the break, not for the scenario."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos.config import REPO_ROOT, ChaosConfig
from chaos.handlers import LIMITED, QUICK
from chaos.history import Entry, History
from chaos.model import Violation
from chaos.runner import ChaosSession, chaos_session
from chaos.workload import Client
from jobs.v1 import jobs_pb2

pytestmark = [pytest.mark.e2e]

SHORT_RUN_SECONDS = 60
SHORT_RUN_SEED = 20261204
# Patches applied before the service's own entry point runs: `python -c <one of these>`.
SKIP_COMPLETION_FENCE = """
import runpy
from shared.storage import queries
fenced = "JOIN reported AS r ON j.job_id = r.job_id AND j.fencing_token = r.fencing_token"
assert fenced in queries.JOB_COMPLETE_BATCH, "the completion statement changed: update this test's patch"
queries.JOB_COMPLETE_BATCH = queries.JOB_COMPLETE_BATCH.replace(fenced, "JOIN reported AS r ON j.job_id = r.job_id")
runpy.run_module("api_service", run_name="__main__", alter_sys=True)
"""
IGNORE_CANCEL = """
import dataclasses, runpy
from worker_service import worker
apply = worker.Worker._apply
def deaf_to_cancels(self, actives, statuses, answered_at):
    heard = [dataclasses.replace(s, cancel_requested=False) if s.held else s for s in statuses]
    apply(self, actives, heard, answered_at)
worker.Worker._apply = deaf_to_cancels
runpy.run_module("worker_service", run_name="__main__", alter_sys=True)
"""


@pytest.mark.timeout(900)
def test_a_short_chaos_run_finds_no_violation(tmp_path: Path) -> None:
    """`make chaos` for a minute with a fixed seed, through its entry point: the last line is the verdict."""
    env = {
        **os.environ,
        "CHAOS_SECONDS": str(SHORT_RUN_SECONDS),
        "CHAOS_SEED": str(SHORT_RUN_SEED),
        "CHAOS_DIR": str(tmp_path / "chaos"),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "chaos"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=840
    )
    print(completed.stdout[-4000:], completed.stderr[-4000:])
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["violations"] == [], summary["violations_by_check"]
    assert completed.returncode == 0
    assert summary["settled"]
    assert summary["operations"] > 100
    # Every kind of fault struck, the storage layer's injected ones included.
    assert summary["faults"] and all(count > 0 for count in summary["faults"].values()), summary["faults"]
    assert summary["jobs_by_state"].get("succeeded", 0) > 20, summary["jobs_by_state"]


def _config(tmp_path: Path, **changes: object) -> ChaosConfig:
    """No random faults and no workload: the test scripts what happens."""
    settings: dict[str, object] = {
        "seconds": 0.0,
        "seed": 7,
        "workdir": tmp_path / "chaos",
        "faults": frozenset(),
        "statement_faults": 0.0,
        "lease_seconds": 2.0,
        "settle_seconds": 90.0,
        "api_replicas": 1,
        "workers": 2,
        "worker_concurrency": 2,
        "limits": {},
        **changes,
    }
    return ChaosConfig(**settings)  # type: ignore[arg-type]  # the test passes each field by name


async def _wait_for(session: ChaosSession, find: Callable[[History], Entry | None], what: str) -> Entry:
    deadline = time.monotonic() + 60
    while True:
        found = find(session.read())
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def _handler_start(job_id: str, above_token: int = 0) -> Callable[[History], Entry | None]:
    return lambda history: next(
        (e for e in history.of("handler.start") if e["job_id"] == job_id and int(e["token"]) > above_token), None
    )


def _checks(violations: list[Violation]) -> set[str]:
    return {v.check for v in violations}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("broken", [False, True], ids=["intact", "fence-skipped"])
async def test_a_completion_that_skips_its_fence_is_named(tmp_path: Path, broken: bool) -> None:
    """A worker stopped past its lease wakes with its handler done and reports under the old token while
    another worker runs the job: the fence refuses it; without the fence the checker names the stored
    result as a stale attempt's."""
    config = _config(tmp_path, api_argv=("-c", SKIP_COMPLETION_FENCE) if broken else ("-m", "api_service"))
    async with chaos_session(config) as session:
        faults = session.history.for_source("nemesis")
        job_id = await session.client("acme").submit_kind(LIMITED, {"seconds_by_attempt": [1.5, 6.0]})
        assert job_id is not None
        first = await _wait_for(session, _handler_start(job_id), "the first attempt to start")
        stopped = next(w for w in session.cluster.workers if first["src"] == f"handler:{w.name}")
        assert stopped.pause()
        faults.record("fault", id=1, kind="lease_pause", phase="start", target=stopped.name)
        await _wait_for(session, _handler_start(job_id, int(first["token"])), "another worker to claim the job")
        stopped.resume()
        faults.record("fault", id=1, kind="lease_pause", phase="end", target=stopped.name)
        report = await session.finish()
    print(report.summary_line())
    if broken:
        assert _checks(report.violations) == {"result_from_stale_attempt"}, report.summary_line()
        assert [v.job_id for v in report.violations] == [job_id]
    else:
        assert report.violations == [], report.summary_line()


def _without_key(self: Client, request: jobs_pb2.SubmitJobRequest) -> jobs_pb2.SubmitJobRequest:
    """The contract's mistake on purpose: an indeterminate answer resubmitted as a new request."""
    resent = jobs_pb2.SubmitJobRequest()
    resent.CopyFrom(request)
    resent.ClearField("idempotency_key")
    return resent


@pytest.mark.timeout(300)
@pytest.mark.parametrize("broken", [False, True], ids=["intact", "key-dropped"])
async def test_a_resubmission_without_its_key_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """With a fifth of the API's statements failing, some COMMIT replies are lost: resubmitted with the
    key they give back the stored job; without it they store a second one, and the checker names it."""
    if broken:
        monkeypatch.setattr(Client, "resubmission", _without_key)
    config = _config(tmp_path, statement_faults=0.2, workers=1)
    async with chaos_session(config) as session:
        client = session.client("acme")
        for _ in range(200):
            await client.submit_kind(QUICK)
            resent = {e["items"][0]["sub"] for e in session.read().of("call") if e.get("resubmission", 0) > 0}
            if len(resent) >= 15:
                break
        report = await session.finish()
    print(report.summary_line())
    if broken:
        assert _checks(report.violations) == {"duplicate_job"}, report.summary_line()
    else:
        assert report.violations == [], report.summary_line()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("broken", [False, True], ids=["intact", "cancel-ignored"])
async def test_a_worker_that_ignores_a_cancel_is_named(tmp_path: Path, broken: bool) -> None:
    """A running job is cancelled a moment after its handler starts: the worker stops the handler at once;
    one that ignores the cancel lets it run to its end, and the checker names the ignored cancel."""
    config = _config(
        tmp_path,
        workers=1,
        cancel_slack_seconds=3.0,
        worker_argv=("-c", IGNORE_CANCEL) if broken else ("-m", "worker_service"),
    )
    async with chaos_session(config) as session:
        client = session.client("acme")
        job_id = await client.submit_kind(LIMITED, {"seconds": 12.0})
        assert job_id is not None
        await _wait_for(session, _handler_start(job_id), "the handler to start")
        assert (await client.cancel_job(job_id)).ok
        await _wait_for(
            session,
            lambda history: next((e for e in history.of("handler.end") if e["job_id"] == job_id), None),
            "the handler to end",
        )
        report = await session.finish()
    print(report.summary_line())
    if broken:
        assert _checks(report.violations) == {"cancel_ignored"}, report.summary_line()
    else:
        assert report.violations == [], report.summary_line()
