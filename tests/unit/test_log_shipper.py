"""The log shipper's periodic send and a release: the lines of a job being released wait for the
release, which carries them, so a cancel costs one call after the worker learns of it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

from durable_jobs.logs import LogLine
from shared.domain.ids import FencingToken, JobId
from shared.domain.job_logs import AttemptLog
from shared.domain.jobs import LeaseRef
from worker_service.api_client import ApiClient
from worker_service.log_shipper import LogShipper


class RecordingApi:
    def __init__(self) -> None:
        self.sent: list[list[AttemptLog]] = []

    async def append_logs(self, chunk: list[AttemptLog], *, deadline: float) -> Any:
        self.sent.append(list(chunk))


def _line(message: str) -> LogLine:
    return LogLine(at=datetime.now(UTC), level="INFO", logger="handler", message=message)


async def test_a_held_job_s_lines_wait_for_its_release_while_the_others_are_sent() -> None:
    api = RecordingApi()
    shipper = LogShipper(cast(ApiClient, api), interval_seconds=0.01)
    running, released = LeaseRef(JobId("a"), FencingToken(1)), LeaseRef(JobId("b"), FencingToken(1))
    shipper.hold(released.job_id)
    shipper.put(running, 1, _line("still working"))
    shipper.put(released, 1, _line("stopping on request"))

    task = asyncio.create_task(shipper.run())
    try:
        for _ in range(200):
            if api.sent:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # a few more intervals: the held lines must still not go
    finally:
        task.cancel()

    sent_jobs = [log.lease.job_id for chunk in api.sent for log in chunk]
    assert sent_jobs == [running.job_id]
    taken = await shipper.take(released.job_id)
    assert [line.message for _, line in taken] == ["stopping on request"]
    assert await shipper.take(released.job_id) == ()
