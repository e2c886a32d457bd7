"""Pages bounded by bytes as well as by count, through the API (in this process) and a client with gRPC's default
4 MiB receive limit: a page of 500 jobs with large labels, of 500 long history events, or of schedules
whose templates carry large payloads, once made a message no client could read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from jobs.v1 import admin_pb2, jobs_pb2
from tests.process_fixtures import ServiceStack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

JOBS = 500
# Each job: 32 labels of 256 characters, about 9 KB; 500 of them are over 4 MiB.
LABELS = {f"label-{i:02}": chr(ord("a") + i % 26) * 256 for i in range(32)}


def _read_all(page: Callable[[str], Any], items: str) -> tuple[list[Any], int]:
    """Every item over every page, and how many pages that took."""
    found: list[Any] = []
    token, pages = "", 0
    while True:
        answer = page(token)
        found += getattr(answer, items)
        pages += 1
        token = answer.next_page_token
        if not token:
            return found, pages


@pytest.fixture
def stack(service_stack: ServiceStack) -> ServiceStack:
    service_stack.start_api()
    return service_stack


def test_pages_of_jobs_with_large_labels_are_cut_by_bytes(stack: ServiceStack) -> None:
    acme, admin = stack.tenant("acme"), stack.admin()
    for _ in range(JOBS // 100):
        acme.submit_many([jobs_pb2.SubmitJobRequest(kind="echo", labels=LABELS) for _ in range(100)])

    listed, pages = _read_all(
        lambda token: acme.stub.ListJobs(
            jobs_pb2.ListJobsRequest(page_size=JOBS, page_token=token), metadata=acme.metadata, timeout=30
        ),
        "jobs",
    )
    assert len({j.job_id for j in listed}) == JOBS and pages > 1
    found, pages = _read_all(
        lambda token: admin.stub.SearchJobs(
            admin_pb2.SearchJobsRequest(page_size=JOBS, page_token=token), metadata=admin.metadata, timeout=30
        ),
        "jobs",
    )
    assert len({j.job.job_id for j in found}) == JOBS and pages > 1


def test_a_long_history_is_paged_by_bytes(stack: ServiceStack, database_url: str) -> None:
    acme = stack.tenant("acme")
    job_id = acme.submit("echo").job.job_id
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO job_events (job_id, tenant, sequence, from_state, to_state, attempt, fencing_token, actor,"
            " reason) SELECT %s, 'acme', 1000 + i, 'pending', 'pending', 0, 0, 'system', repeat('x', 20000)"
            " FROM generate_series(1, %s) AS i",
            (job_id, JOBS),
        )

    events, pages = _read_all(
        lambda token: acme.stub.ListJobEvents(
            jobs_pb2.ListJobEventsRequest(job_id=job_id, page_size=JOBS, page_token=token),
            metadata=acme.metadata,
            timeout=30,
        ),
        "events",
    )
    assert len(events) == JOBS + 1 and pages > 1


def test_schedules_whose_templates_carry_large_payloads_are_paged_by_bytes(stack: ServiceStack) -> None:
    acme = stack.tenant("acme")
    for i in range(6):
        job = jobs_pb2.SubmitJobRequest(kind="echo", payload=bytes([i]) * 1_000_000)
        request = jobs_pb2.CreateScheduleRequest(schedule_id=f"big-{i}", job=job, cron="0 3 * * *")
        acme.stub.CreateSchedule(request, metadata=acme.metadata, timeout=30)

    schedules, pages = _read_all(
        lambda token: acme.stub.ListSchedules(
            jobs_pb2.ListSchedulesRequest(page_token=token), metadata=acme.metadata, timeout=30
        ),
        "schedules",
    )
    assert [s.schedule_id for s in schedules] == [f"big-{i}" for i in range(6)] and pages > 1
