"""A schedule's job template honours every field a submission does, or refuses it naming the field: a
field is never accepted and then dropped (a template's limit_keys were, and seven of its jobs ran at once
under a bound of one)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from api_service import convert
from api_service.usecases.admission import SubmissionAdmission, TenantLimits
from api_service.usecases.schedule_runner import ScheduleRunner
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from jobs.v1 import jobs_pb2
from shared.domain.errors import InvalidArgument
from shared.domain.ids import TenantId
from shared.domain.schedules import JobTemplate, NewSchedule, OverlapPolicy, validate_cron
from shared.domain.submission_rules import SubmissionLimits
from shared.storage.database import Database
from tests import factories

pytestmark = pytest.mark.timeout(30)
TENANT = TenantId("acme")
_STAMP = timestamp_pb2.Timestamp(seconds=4_000_000_000)
# A value other than the default for every SubmitJobRequest field; a field added without one fails the
# test below, so nobody adds a submission field without deciding what a schedule does with it.
SAMPLES: dict[str, Any] = {
    "kind": "echo",
    "payload": b"nightly",
    "idempotency_key": "mine",
    "priority": 7,
    "run_after": _STAMP,
    "max_attempts": 4,
    "deadline": _STAMP,
    "resource_key": "doc",
    "resource_version": 3,
    "depends_on": ["00000000-0000-7000-8000-000000000000"],
    "labels": {"team": "search"},
    "dedupe_by_input": True,
    "limit_keys": ["nightly@1"],
    "sequence_key": "nightly",
    "singleton_key": "nightly",
    "debounce": jobs_pb2.Debounce(key="nightly", quiet_seconds=1, max_wait_seconds=2),
}


@pytest.mark.parametrize("name", [f.name for f in jobs_pb2.SubmitJobRequest.DESCRIPTOR.fields])
def test_every_submission_field_is_carried_by_a_template_or_refused_naming_it(name: str) -> None:
    assert name in SAMPLES, f"SubmitJobRequest.{name} is new: decide what a schedule's template does with it"
    job = jobs_pb2.SubmitJobRequest(kind="echo")
    value = SAMPLES[name]
    if isinstance(value, Message):
        getattr(job, name).CopyFrom(value)
    elif isinstance(value, dict):
        getattr(job, name).update(value)
    elif isinstance(value, list):
        getattr(job, name).extend(value)
    else:
        setattr(job, name, value)
    if name == "resource_version":
        job.resource_key = SAMPLES["resource_key"]
    request = jobs_pb2.CreateScheduleRequest(schedule_id="nightly", job=job, cron="0 3 * * *")

    try:
        template = convert.new_schedule_from_proto(request).template
    except InvalidArgument as refused:
        assert f"job.{name}" in [v.field for v in refused.violations]
        return
    fired = template.job_for(uuid.uuid4(), datetime.now(UTC))
    submitted = convert.new_job_from_proto(job)
    assert getattr(fired, name) == getattr(submitted, name)
    shown = convert.schedule_to_proto(_stored(template)).job
    assert getattr(shown, name) == getattr(job, name), "GetSchedule must show what each fire submits"


def _stored(template: JobTemplate) -> Any:
    from shared.domain.schedules import Schedule

    now = datetime.now(UTC)
    return Schedule(
        tenant=TENANT,
        schedule_id="nightly",
        schedule_uid=uuid.uuid4(),
        template=template,
        spec=validate_cron("0 3 * * *", "UTC"),
        overlap=OverlapPolicy.ALLOW,
        catchup_window_seconds=60,
        paused=False,
        note="",
        next_fire_at=now,
        buffered_fire_at=None,
        last_fire_at=None,
        last_job_id=None,
        fires_submitted=0,
        fires_missed=0,
        fires_skipped=0,
        last_error="",
        created_at=now,
        created_by="t",
    )


async def test_fires_of_a_template_with_limit_keys_are_bounded_by_them(db: Database, sync_db) -> None:
    kinds = await factories.published_kinds(db)
    submissions = SubmissionService(db, kinds, SubmissionLimits())
    admission = SubmissionAdmission(db, TenantLimits())
    schedules = ScheduleService(db, kinds, SubmissionLimits(), submissions, admission)
    template = JobTemplate("echo", b"x", limit_keys=("nightly@1",))
    new = NewSchedule("nightly", template, validate_cron("* * * * *", "UTC"), OverlapPolicy.ALLOW, 7200)
    created = await schedules.create(TENANT, "tenant:acme", new)
    assert created.template.limit_keys == ("nightly@1",)

    for _ in range(3):
        await schedules.trigger(TENANT, "nightly")
    sync_db.execute("UPDATE schedules SET next_fire_at = now() - interval '1 minute'")
    assert await ScheduleRunner(db, submissions, admission).tick()

    fired = sync_db.rows("SELECT limit_keys, limit_key_bounds FROM jobs ORDER BY created_at")
    assert len(fired) == 4
    assert all(row["limit_key_bounds"] == [1] and len(row["limit_keys"]) == 1 for row in fired)
    claimed = await factories.claim(db, limit=10, kinds=("echo",))
    assert len(claimed) == 1, "a template bounded to one at a time runs one at a time"
    assert (await schedules.get(TENANT, "nightly")).template.limit_keys == ("nightly@1",)
