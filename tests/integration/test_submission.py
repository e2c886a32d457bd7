"""Submitting: validation that names the field, idempotent replays, all-or-nothing batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from api_service.usecases.submission import SubmissionService
from shared.domain.errors import AlreadyExists, InvalidArgument
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState, NewJob
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)

TENANT = TenantId("tenant-a")
ACTOR = "tenant:tenant-a"
PAYLOAD_LIMIT_BYTES = 1024
CONCURRENT_SUBMITS = 50


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(
        db, await factories.published_kinds(db), SubmissionLimits(max_payload_bytes=PAYLOAD_LIMIT_BYTES)
    )


def job_count(sync_db) -> int:
    return sync_db.one("SELECT count(*) AS n FROM jobs")["n"]


async def test_a_submission_is_stored_pending_with_the_kinds_defaults(service, sync_db):
    outcome = await service.submit(TENANT, ACTOR, factories.new_job(kind="flaky", labels={"team": "core"}))

    assert outcome.created
    row = sync_db.job(outcome.job.job_id)
    assert (row["state"], row["tenant"], row["kind"], row["max_attempts"]) == ("pending", TENANT, "flaky", 5)
    assert row["labels"] == {"team": "core"}


async def test_a_replay_with_the_same_key_returns_the_same_job(service, sync_db):
    request = factories.new_job(idempotency_key="order-7", payload=b"same")

    first = await service.submit(TENANT, ACTOR, request)
    replay = await service.submit(TENANT, ACTOR, replace(request))

    assert (first.created, replay.created) == (True, False)
    assert replay.job == first.job
    assert job_count(sync_db) == 1


async def test_the_same_key_for_a_different_request_is_refused(service, sync_db):
    first = await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="order-7", payload=b"one"))
    before = sync_db.snapshot()

    with pytest.raises(AlreadyExists) as raised:
        await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="order-7", payload=b"two"))

    assert raised.value.metadata == {"job_id": first.job.job_id}
    assert sync_db.snapshot() == before


async def test_an_empty_key_is_still_checked_against_the_request(service, sync_db):
    await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="", payload=b"one"))

    with pytest.raises(AlreadyExists):
        await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="", payload=b"two"))
    assert job_count(sync_db) == 1


async def test_keys_are_per_tenant(service, sync_db):
    mine = await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="k"))
    theirs = await service.submit(TenantId("tenant-b"), "tenant:tenant-b", factories.new_job(idempotency_key="k"))

    assert theirs.created and theirs.job.job_id != mine.job.job_id


async def test_concurrent_submits_with_one_key_make_one_job(database_url, sync_db):
    wide = await Database.open(PoolSettings(database_url, min_size=1, max_size=20), wait=True)
    try:
        service = SubmissionService(wide, await factories.published_kinds(wide), SubmissionLimits())
        request = factories.new_job(idempotency_key="once", payload=b"racing")
        async with asyncio.timeout(20):
            outcomes = await asyncio.gather(
                *(service.submit(TENANT, ACTOR, request) for _ in range(CONCURRENT_SUBMITS))
            )
    finally:
        await wide.close()

    assert sum(o.created for o in outcomes) == 1
    assert {o.job.job_id for o in outcomes} == {outcomes[0].job.job_id}
    assert job_count(sync_db) == 1


async def test_submit_jobs_stores_every_item_in_order(service, sync_db):
    outcomes = await service.submit_many(
        TENANT, ACTOR, [factories.new_job(payload=b"%d" % n, idempotency_key=f"k{n}") for n in range(3)]
    )
    replayed = await service.submit_many(
        TENANT, ACTOR, [factories.new_job(payload=b"%d" % n, idempotency_key=f"k{n}") for n in range(3)]
    )

    assert [o.created for o in outcomes] == [True] * 3 and [o.created for o in replayed] == [False] * 3
    assert [o.job.job_id for o in replayed] == [o.job.job_id for o in outcomes]
    assert job_count(sync_db) == 3


async def test_submit_jobs_with_one_invalid_item_writes_nothing(service, sync_db):
    batch = [factories.new_job(), factories.new_job(), factories.new_job(kind="no-such-kind")]

    with pytest.raises(InvalidArgument) as raised:
        await service.submit_many(TENANT, ACTOR, batch)

    assert [v.field for v in raised.value.violations] == ["jobs[2].kind"]
    assert job_count(sync_db) == 0


async def test_submit_jobs_with_one_reused_key_writes_nothing(service, sync_db):
    await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="taken", payload=b"one"))
    before = sync_db.snapshot()
    batch = [factories.new_job(idempotency_key="fresh"), factories.new_job(idempotency_key="taken", payload=b"two")]

    with pytest.raises(AlreadyExists):
        await service.submit_many(TENANT, ACTOR, batch)

    assert sync_db.snapshot() == before


@pytest.mark.parametrize("size", [0, 1001])
async def test_submit_jobs_needs_between_one_and_the_batch_limit(service, sync_db, size):
    with pytest.raises(InvalidArgument) as raised:
        await service.submit_many(TENANT, ACTOR, [factories.new_job()] * size)

    assert [v.field for v in raised.value.violations] == ["jobs"]
    assert job_count(sync_db) == 0


NOW = datetime(2030, 1, 1, tzinfo=UTC)
INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "empty kind": ({"kind": ""}, "kind"),
    "malformed kind": ({"kind": "Not A Kind"}, "kind"),
    "unknown kind": ({"kind": "no-such-kind"}, "kind"),
    "over-long kind": ({"kind": "k" * 129}, "kind"),
    "NUL in kind": ({"kind": "echo\x00"}, "kind"),
    "payload over the limit": ({"payload": b"x" * (PAYLOAD_LIMIT_BYTES + 1)}, "payload"),
    "NUL in idempotency_key": ({"idempotency_key": "key\x00"}, "idempotency_key"),
    "over-long idempotency_key": ({"idempotency_key": "k" * 257}, "idempotency_key"),
    "NUL in resource_key": ({"resource_key": "doc\x00", "resource_version": 1}, "resource_key"),
    "over-long resource_key": ({"resource_key": "r" * 513, "resource_version": 1}, "resource_key"),
    "NUL in a label value": ({"labels": {"env": "prod\x00"}}, "labels['env']"),
    "over-long label value": ({"labels": {"env": "v" * 257}}, "labels['env']"),
    "NUL in a label key": ({"labels": {"env\x00": "prod"}}, "labels['env\\x00']"),
    "newline ending a label key": ({"labels": {"env\n": "prod"}}, "labels['env\\n']"),
    "over-long label key": ({"labels": {"k" * 64: "v"}}, f"labels['{'k' * 64}']"),
    "empty label key": ({"labels": {"": "v"}}, "labels['']"),
    "malformed dependency": ({"depends_on": ("not-a-job-id",)}, "depends_on[0]"),
    "priority below the range": ({"priority": -1001}, "priority"),
    "priority above the range": ({"priority": 1001}, "priority"),
    "negative max_attempts": ({"max_attempts": -1}, "max_attempts"),
    "negative resource_version": ({"resource_key": "doc", "resource_version": -1}, "resource_version"),
    "resource_version without a key": ({"resource_version": -5}, "resource_version"),
    "deadline before run_after": ({"run_after": NOW, "deadline": NOW - timedelta(seconds=1)}, "deadline"),
}


@pytest.mark.parametrize("case", INVALID)
async def test_an_invalid_submission_names_its_field_and_writes_nothing(service, sync_db, case):
    fields, expected_field = INVALID[case]

    with pytest.raises(InvalidArgument) as raised:
        await service.submit(TENANT, ACTOR, factories.new_job(**fields))

    assert [v.field for v in raised.value.violations] == [expected_field]
    assert job_count(sync_db) == 0


@pytest.mark.parametrize("case", ["NUL in idempotency_key", "negative max_attempts", "NUL in a label value"])
async def test_an_invalid_item_of_a_batch_is_named_by_its_index(service, sync_db, case):
    fields, expected_field = INVALID[case]

    with pytest.raises(InvalidArgument) as raised:
        await service.submit_many(TENANT, ACTOR, [factories.new_job(), factories.new_job(**fields)])

    assert [v.field for v in raised.value.violations] == [f"jobs[1].{expected_field}"]
    assert job_count(sync_db) == 0


async def test_every_violation_of_a_submission_is_reported_at_once(service):
    with pytest.raises(InvalidArgument) as raised:
        await service.submit(TENANT, ACTOR, factories.new_job(kind="", priority=5000, max_attempts=-1))

    assert [v.field for v in raised.value.violations] == ["kind", "priority", "max_attempts"]


async def test_a_submitted_job_is_claimable_at_once(service, db):
    outcome = await service.submit(TENANT, ACTOR, factories.new_job())

    claimed = await factories.claim_one(db)

    assert claimed.job_id == outcome.job.job_id and outcome.job.state is JobState.PENDING


async def test_submit_jobs_with_one_key_for_two_different_requests_names_the_later_item(service, sync_db):
    batch = [
        factories.new_job(payload=b"plain"),
        factories.new_job(idempotency_key="order-7", payload=b"one"),
        factories.new_job(idempotency_key="order-8"),
        factories.new_job(idempotency_key="order-7", payload=b"two"),
    ]

    with pytest.raises(InvalidArgument) as raised:
        await service.submit_many(TENANT, ACTOR, batch)

    assert [v.field for v in raised.value.violations] == ["jobs[3].idempotency_key"]
    assert "jobs[1]" in raised.value.violations[0].description
    assert job_count(sync_db) == 0


async def test_submit_jobs_with_one_key_for_two_identical_requests_makes_one_job(service, sync_db):
    request = factories.new_job(idempotency_key="order-7", payload=b"same")

    first, second = await service.submit_many(TENANT, ACTOR, [request, replace(request)])

    assert (first.created, second.created) == (True, False)
    assert first.job.job_id == second.job.job_id
    assert job_count(sync_db) == 1


async def _another_tenants_job(db: Database) -> str:
    return (await factories.insert_job(db, tenant=TenantId("tenant-b"))).job_id


async def _no_job(db: Database) -> str:
    return "00000000-0000-4000-8000-000000000000"


async def _as_submitted(service: SubmissionService, dependency: str) -> NewJob:
    return factories.new_job(depends_on=(dependency,))


async def _as_superseded(service: SubmissionService, dependency: str) -> NewJob:
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=2))
    return factories.new_job(resource_key="doc", resource_version=1, depends_on=(dependency,))


async def _as_attached(service: SubmissionService, dependency: str) -> NewJob:
    await service.submit(TENANT, ACTOR, factories.new_job(payload=b"text", dedupe_by_input=True))
    return factories.new_job(payload=b"text", dedupe_by_input=True, depends_on=(dependency,))


SUBMISSION_PATHS = {"stored": _as_submitted, "stored superseded": _as_superseded, "attached": _as_attached}
UNKNOWN_DEPENDENCIES = {"no such job": _no_job, "another tenant's job": _another_tenants_job}


@pytest.mark.parametrize("dependency", UNKNOWN_DEPENDENCIES)
@pytest.mark.parametrize("path", SUBMISSION_PATHS)
async def test_dependencies_are_checked_on_every_path_a_submission_takes(db, service, sync_db, path, dependency):
    unknown = await UNKNOWN_DEPENDENCIES[dependency](db)
    submission = await SUBMISSION_PATHS[path](service, unknown)
    before = sync_db.snapshot()

    with pytest.raises(InvalidArgument) as raised:
        await service.submit(TENANT, ACTOR, submission)
    assert [v.field for v in raised.value.violations] == ["depends_on[0]"]
    with pytest.raises(InvalidArgument) as raised:
        await service.submit_many(TENANT, ACTOR, [factories.new_job(), submission])
    assert [v.field for v in raised.value.violations] == ["jobs[1].depends_on[0]"]

    assert sync_db.snapshot() == before


async def test_job_ids_are_time_ordered_uuids_whichever_path_made_them(service):
    # A plain submission gets its id from the API, a keyed one from the database's default.
    plain = await service.submit(TENANT, ACTOR, factories.new_job())
    keyed = await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="time-ordered"))

    ids = [uuid.UUID(outcome.job.job_id) for outcome in (plain, keyed)]
    assert [job_id.version for job_id in ids] == [7, 7]
    # Both begin with the same clock, to the minute.
    assert abs((ids[0].int >> 80) - (ids[1].int >> 80)) < 60_000


def _backends_waiting_on_a_lock(database_url: str) -> int:
    with psycopg.connect(database_url) as probe:
        return probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]


async def test_a_batch_committed_after_its_caller_left_is_stored_and_logged(
    service: SubmissionService, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller that gives up (its deadline, a cancelled call) does not undo a batch on its way to COMMIT,
    and what commits is logged as submitted like any other job."""
    await service.submit(TENANT, ACTOR, factories.new_job(resource_key="doc", resource_version=1))
    caplog.set_level(logging.INFO, logger="api_service.usecases.submission")
    with psycopg.connect(database_url) as locker:
        locker.execute("SELECT 1 FROM resource_heads FOR UPDATE")
        caller = asyncio.create_task(
            service.submit_many(TENANT, ACTOR, [factories.new_job(resource_key="doc", resource_version=2)])
        )
        await wait_until(lambda: _backends_waiting_on_a_lock(database_url) == 1, what="the batch to wait")
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller
        locker.rollback()

    def stored() -> list[str]:
        with psycopg.connect(database_url) as probe:
            return [row[0] for row in probe.execute("SELECT job_id::text FROM jobs WHERE resource_version = 2")]

    await wait_until(lambda: bool(stored()), what="the batch to commit")
    (job_id,) = stored()
    await wait_until(
        lambda: any(r.message == "job submitted" and r.__dict__.get("job_id") == job_id for r in caplog.records),
        what="its job to be logged as submitted",
    )
