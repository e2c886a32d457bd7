"""Plain batches as columns (SubmitJobs of plain submissions, CompleteJobs without children): the same rows,
history, errors and outcomes as the general paths, which take every item one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import InvalidArgument
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import Completion, CompletionBatch, JobState, PlainBatch, ReportOutcome
from shared.domain.submission_rules import SubmissionLimits
from shared.domain.trace_context import TraceContext
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(60)

TENANT = TenantId("tenant-a")
ACTOR = "tenant:tenant-a"
WORKER_ID = "worker-1"
SOON = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=1")
# Every column a plain submission may set, given and not, and the kinds' own defaults (flaky: 5 attempts).
VARIED = dict(
    kinds=["echo", "flaky", "echo", "flaky"],
    payloads=[b"", b"\x00\xff binary", "é".encode(), b"x" * 1000],
    priorities=[0, -1000, 1000, 7],
    max_attempts=[0, 0, 9, 100],
    run_afters=[None, SOON, None, SOON],
    deadlines=[None, SOON + timedelta(hours=1), SOON, None],
    labels=[{}, {"team": "ünïcode", "a.b/c-d": ""}, {}, {"k": "v"}],
)
COLUMNS = (
    "tenant, kind, state, payload, priority, run_after, deadline, max_attempts, retry_budget, backoff_base_seconds,"
    " backoff_cap_seconds, labels, transition_actor, traceparent, tracestate, parent_job_id"
)


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits(max_payload_bytes=1000))


def _batch(**columns: object) -> PlainBatch:
    return PlainBatch(**{**VARIED, **columns}, trace_context=TRACE)  # type: ignore[arg-type]


def _rows(sync_db, job_ids: list[str]) -> list[dict]:
    return [sync_db.one(f"SELECT {COLUMNS} FROM jobs WHERE job_id = %s", (job_id,)) for job_id in job_ids]


async def test_a_plain_batch_stores_the_rows_and_history_of_the_general_path(service, sync_db):
    batch = _batch()
    plain_ids = await service.submit_plain_ids(TENANT, ACTOR, batch)
    general = await service.submit_many_ids(TENANT, ACTOR, batch.new_jobs())

    assert len(plain_ids) == len(batch) == len(set(plain_ids))
    plain_rows, general_rows = _rows(sync_db, plain_ids), _rows(sync_db, [job_id for job_id, _ in general])
    # A run_after not given is the clock's at insert: equal only where given.
    for row in (*plain_rows, *general_rows):
        row["run_after"] = row["run_after"] if row["run_after"] == SOON else None
    assert plain_rows == general_rows
    assert [row["max_attempts"] for row in plain_rows] == [3, 5, 9, 100]
    assert plain_rows[1]["labels"] == {"team": "ünïcode", "a.b/c-d": ""}
    for job_id in plain_ids:
        event = sync_db.one("SELECT to_state, reason, actor FROM job_events WHERE job_id = %s", (job_id,))
        assert event == {"to_state": "pending", "reason": "submitted", "actor": ACTOR}
        assert sync_db.job(job_id)["state"] == JobState.PENDING


@pytest.mark.parametrize(
    "columns",
    [
        {"kinds": ["echo", "no-such-kind", "echo", "Bad Kind"]},
        {"payloads": [b"", b"x" * 1001, b"", b""]},
        {"priorities": [0, 1001, -1001, 0]},
        {"max_attempts": [0, -1, 101, 0]},
        {"labels": [{}, {"-bad": "v"}, {"k": "\x00"}, {}]},
        {"run_afters": [SOON] * 4, "deadlines": [None, SOON, SOON - timedelta(seconds=1), None]},
    ],
    ids=["kinds", "payload", "priority", "max_attempts", "labels", "deadline"],
)
async def test_a_plain_batch_is_refused_as_the_general_path_refuses_it(service, sync_db, columns):
    batch = _batch(**columns)
    before = sync_db.snapshot()
    with pytest.raises(InvalidArgument) as plain:
        await service.submit_plain_ids(TENANT, ACTOR, batch)
    with pytest.raises(InvalidArgument) as general:
        await service.submit_many_ids(TENANT, ACTOR, batch.new_jobs())

    assert plain.value.violations == general.value.violations
    assert sync_db.snapshot() == before


async def test_a_plain_batch_over_the_size_limit_is_refused_as_the_general_path_refuses_it(db, sync_db):
    service = SubmissionService(db, await factories.published_kinds(db), SubmissionLimits(max_batch_size=3))
    with pytest.raises(InvalidArgument) as plain:
        await service.submit_plain_ids(TENANT, ACTOR, _batch())
    with pytest.raises(InvalidArgument) as general:
        await service.submit_many_ids(TENANT, ACTOR, _batch().new_jobs())

    assert plain.value.violations == general.value.violations
    assert sync_db.rows("SELECT job_id FROM jobs") == []


class _Rejections:
    def __init__(self) -> None:
        self.outcomes: list[ReportOutcome] = []

    def rejected(self, outcome: ReportOutcome) -> None:
        self.outcomes.append(outcome)


async def _claimed(db: Database, count: int) -> list[tuple[JobId, FencingToken]]:
    return [
        (claimed.job_id, FencingToken(claimed.fencing_token))
        for claimed in [await factories.insert_and_claim(db) for _ in range(count)]
    ]


async def test_completion_columns_store_results_and_answer_each_refusal(db, sync_db):
    rejections = _Rejections()
    reports = WorkerReports(db, rejections, lease_max_seconds=3600)
    (done, _), (stale, _), (cancelled, _), (taken, _) = leases = await _claimed(db, 4)
    await factories.reclaim(db, stale)  # its first lease is stale now
    sync_db.execute("UPDATE jobs SET cancel_requested = true WHERE job_id = %s", (cancelled,))
    await factories.set_state(db, taken, JobState.SUCCEEDED)
    batch = CompletionBatch(
        [job_id for job_id, _ in leases], [token for _, token in leases], [b"r0", b"r1", b"r2", b"r3"]
    )

    outcomes = await reports.complete_plain(WORKER_ID, batch)

    assert outcomes == [
        ReportOutcome.ACCEPTED,
        ReportOutcome.LEASE_LOST,
        ReportOutcome.JOB_CANCELLED,
        ReportOutcome.LEASE_LOST,
    ]
    assert rejections.outcomes == outcomes[1:]
    assert [sync_db.job(job_id)["state"] for job_id, _ in leases] == ["succeeded", "running", "cancelled", "succeeded"]
    assert bytes(sync_db.one("SELECT payload FROM job_results WHERE job_id = %s", (done,))["payload"]) == b"r0"
    assert sync_db.rows("SELECT job_id FROM job_results WHERE job_id <> %s", (done,)) == []


async def test_completion_columns_that_fail_a_check_take_the_general_path(db, sync_db):
    reports = WorkerReports(db, _Rejections(), lease_max_seconds=3600, max_result_bytes=10)
    (first, token), (second, second_token) = await _claimed(db, 2)

    with pytest.raises(InvalidArgument) as twice:
        await reports.complete_plain(WORKER_ID, CompletionBatch([first, first], [token, token], [b"", b""]))
    with pytest.raises(InvalidArgument) as twice_general:
        await reports.complete_many(WORKER_ID, [Completion(first, token, b""), Completion(first, token, b"")])
    assert twice.value.violations == twice_general.value.violations
    with pytest.raises(InvalidArgument) as malformed:
        await reports.complete_plain(WORKER_ID, CompletionBatch([JobId(first.upper())], [token], [b""]))
    assert malformed.value.violations[0].field == "completions[0].job_id"
    with pytest.raises(InvalidArgument):
        await reports.complete_plain(WORKER_ID, CompletionBatch([first], [FencingToken(0)], [b""]))

    outcomes = await reports.complete_plain(
        WORKER_ID, CompletionBatch([first, second], [token, second_token], [b"x" * 11, b"fits"])
    )
    assert outcomes == [ReportOutcome.RESULT_TOO_LARGE, ReportOutcome.ACCEPTED]
    assert [sync_db.job(job_id)["state"] for job_id in (first, second)] == ["failed", "succeeded"]
