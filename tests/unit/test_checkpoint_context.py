"""The handler's side of checkpoints and progress, in-process by design: the context's checks and the
worker's progress coalescing, against an in-memory context and a fake API that records its calls."""

from __future__ import annotations

import asyncio

import pytest

from shared.domain.checkpoints import CHECKPOINT_DATA_MAX_BYTES, ProgressReport
from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import LeaseRef, ReportOutcome
from shared.handlers import CheckpointRefused, PermanentError
from shared.handlers.testing import MemoryProgress, context_for
from worker_service.api_client import ApiClient
from worker_service.checkpoint_book import ApiCheckpointBook
from worker_service.progress_reporter import ProgressReporter

pytestmark = pytest.mark.timeout(30)
LEASE = LeaseRef(JobId("00000000-0000-4000-8000-000000000001"), FencingToken(1))


async def test_a_checkpoint_keeps_bytes_as_they_are_and_other_values_as_json():
    ctx = context_for(attempt=2, checkpoints={"upload_check": {"sha256": "ab"}})
    earlier = ctx.completed_stage("upload_check")
    assert earlier is not None and earlier.json() == {"sha256": "ab"}
    assert ctx.completed_stage("extract_text") is None
    stored = await ctx.checkpoint("extract_text", b"\x00raw")
    assert stored.data == b"\x00raw" and stored.attempt == 2
    assert ctx.checkpoint_blocking("embeddings", ["a", 1]).json() == ["a", 1]
    assert set(ctx.checkpoints) == {"upload_check", "extract_text", "embeddings"}


@pytest.mark.parametrize(
    ("stage", "data", "says"),
    [
        ("embeddings", b"x" * (CHECKPOINT_DATA_MAX_BYTES + 1), "store the stage's output elsewhere"),
        ("", b"", "a stage name is 1 to 200 characters"),
        ("s" * 201, b"", "a stage name is 1 to 200 characters"),
    ],
)
async def test_a_checkpoint_out_of_bounds_fails_the_attempt_permanently_and_stores_nothing(stage, data, says):
    ctx = context_for()
    with pytest.raises(CheckpointRefused, match=says) as refused:
        await ctx.checkpoint(stage, data)
    assert isinstance(refused.value, PermanentError)
    assert ctx.checkpoints == {}


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan"), float("inf")])
def test_progress_is_a_fraction_from_0_to_1(fraction):
    with pytest.raises(ValueError, match="from 0 to 1"):
        context_for().report_progress(fraction)


def test_a_progress_message_is_cut_to_its_bound():
    ctx = context_for()
    ctx.report_progress(1, "m" * 500)
    assert isinstance(ctx.progress_sink, MemoryProgress)
    assert ctx.progress_sink.reports == [(1.0, "m" * 200)]


async def test_checkpoint_blocking_refuses_to_block_the_event_loop():
    api = ApiClient("127.0.0.1:1", "token", "w")  # never called: the refusal comes first
    try:
        book = ApiCheckpointBook(api, LEASE, report_seconds=1)
        with pytest.raises(RuntimeError, match="await ctx.checkpoint"):
            book.record_blocking("stage", b"")
    finally:
        await api.close()


class RecordingApi:
    def __init__(self) -> None:
        self.calls: list[list[ProgressReport]] = []
        self.called = asyncio.Event()

    async def report_progress(self, reports: list[ProgressReport], *, deadline: float) -> list[ReportOutcome]:
        self.calls.append(list(reports))
        self.called.set()
        return [ReportOutcome.ACCEPTED] * len(reports)


async def test_a_burst_of_progress_costs_one_call_and_the_last_value_is_flushed():
    api = RecordingApi()
    reporter = ProgressReporter(api, interval_seconds=3600)  # type: ignore[arg-type]  # the fake API
    running = asyncio.create_task(reporter.run())
    try:
        sink = reporter.sink(LEASE)
        for step in range(1000):
            sink.report(step / 1000, f"step {step}")
        await asyncio.wait_for(api.called.wait(), 10)
        assert [[r.message for r in call] for call in api.calls] == [["step 999"]]
        sink.report(1.0, "done")  # inside the interval: waits, unless the attempt ends
        await reporter.flush(LEASE.job_id)
        assert [r.message for r in api.calls[-1]] == ["done"] and len(api.calls) == 2
        await reporter.flush(LEASE.job_id)
        assert len(api.calls) == 2, "nothing new: nothing sent"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_progress_reported_from_a_thread_reaches_the_loop():
    api = RecordingApi()
    reporter = ProgressReporter(api, interval_seconds=3600)  # type: ignore[arg-type]  # the fake API
    running = asyncio.create_task(reporter.run())
    try:
        await asyncio.sleep(0)  # the reporter's loop is known once it runs
        await asyncio.to_thread(reporter.sink(LEASE).report, 0.5, "from a thread")
        await asyncio.wait_for(api.called.wait(), 10)
        assert [r.message for r in api.calls[0]] == ["from a thread"]
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
