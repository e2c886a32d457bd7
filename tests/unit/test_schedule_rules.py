"""The schedule rules in process: cron times across DST changes, catch-up and overlap decisions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from shared.domain.errors import InvalidArgument
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import NewJob
from shared.domain.schedules import (
    CronSpec,
    FireAction,
    JobTemplate,
    OverlapPolicy,
    Schedule,
    cron_warning,
    fire_idempotency_key,
    plan_fire_step,
    template_from_job,
    validate_cron,
)

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def _fires(cron: str, zone: str, start: datetime, count: int) -> list[datetime]:
    spec = CronSpec(cron, zone)
    fires, at = [], start
    for _ in range(count):
        at = spec.next_after(at)
        fires.append(at)
    return fires


def _local(fires: list[datetime], zone: ZoneInfo) -> list[str]:
    return [f.astimezone(zone).strftime("%m-%d %H:%M %Z") for f in fires]


def test_a_daily_time_in_the_skipped_hour_fires_once_right_after_the_spring_forward_gap():
    fires = _fires("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12, tzinfo=NEW_YORK), 3)
    assert _local(fires, NEW_YORK) == ["03-08 03:00 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"]


def test_a_daily_time_in_the_repeated_hour_fires_once_on_the_fall_back_day():
    fires = _fires("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12, tzinfo=NEW_YORK), 3)
    assert _local(fires, NEW_YORK) == ["11-01 01:30 EDT", "11-02 01:30 EST", "11-03 01:30 EST"]
    fires = _fires("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, tzinfo=BERLIN), 3)
    assert _local(fires, BERLIN) == ["10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET"]


def test_an_hourly_schedule_fires_every_real_hour_across_both_changes():
    spring = _fires("0 * * * *", "America/New_York", datetime(2026, 3, 8, 0, 30, tzinfo=NEW_YORK), 3)
    assert _local(spring, NEW_YORK) == ["03-08 01:00 EST", "03-08 03:00 EDT", "03-08 04:00 EDT"]
    autumn = _fires("0 * * * *", "America/New_York", datetime(2026, 11, 1, 0, 30, tzinfo=NEW_YORK), 3)
    assert _local(autumn, NEW_YORK) == ["11-01 01:00 EDT", "11-01 01:00 EST", "11-01 02:00 EST"]
    assert [b - a for a, b in zip(autumn, autumn[1:], strict=False)] == [timedelta(hours=1)] * 2


@pytest.mark.parametrize(
    ("cron", "zone", "field"),
    [
        ("61 * * * *", "UTC", "cron"),
        ("* * *", "UTC", "cron"),
        ("0 0 30 2 *", "UTC", "cron"),
        ("0 * * * *", "Mars/Olympus", "time_zone"),
    ],
)
def test_bad_input_names_its_field(cron, zone, field):
    with pytest.raises(InvalidArgument) as refused:
        validate_cron(cron, zone)
    assert [v.field for v in refused.value.violations] == [field]


def test_a_template_refuses_the_fields_each_fire_sets_itself():
    with pytest.raises(InvalidArgument) as refused:
        template_from_job(NewJob(kind="echo", payload=b"", idempotency_key="k", depends_on=(JobId("x"),)))
    assert {v.field for v in refused.value.violations} == {"job.idempotency_key", "job.depends_on"}


def _schedule(overlap: OverlapPolicy, next_fire_at: datetime, *, window: int = 60, buffered: datetime | None = None):
    return Schedule(
        tenant=TenantId("acme"),
        schedule_id="s",
        schedule_uid=uuid.uuid4(),
        template=JobTemplate("echo"),
        spec=CronSpec("* * * * * *", "UTC"),
        overlap=overlap,
        catchup_window_seconds=window,
        paused=False,
        note="",
        next_fire_at=next_fire_at,
        buffered_fire_at=buffered,
        last_fire_at=None,
        last_job_id=JobId("previous"),
        fires_submitted=0,
        fires_missed=0,
        fires_skipped=0,
        last_error="",
        created_at=next_fire_at,
        created_by="t",
    )


NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def test_fires_older_than_the_catch_up_window_are_missed_and_the_rest_fire():
    step = plan_fire_step(_schedule(OverlapPolicy.ALLOW, NOW - timedelta(hours=1), window=10), NOW, False)
    assert step.missed == 3600 - 10
    assert step.action is FireAction.SUBMIT and step.fire_at == NOW - timedelta(seconds=10)
    assert step.next_fire_at == NOW - timedelta(seconds=9)


def test_overlap_policies_decide_a_fire_while_the_previous_job_runs():
    due = NOW - timedelta(seconds=1)
    assert plan_fire_step(_schedule(OverlapPolicy.SKIP, due), NOW, True).action is FireAction.SKIP
    assert plan_fire_step(_schedule(OverlapPolicy.ALLOW, due), NOW, True).action is FireAction.SUBMIT
    buffered = plan_fire_step(_schedule(OverlapPolicy.BUFFER_ONE, due), NOW, True)
    assert (buffered.action, buffered.buffered_fire_at) == (FireAction.BUFFER, due)
    second = plan_fire_step(_schedule(OverlapPolicy.BUFFER_ONE, NOW, buffered=due), NOW, True)
    assert (second.action, second.buffered_fire_at) == (FireAction.SKIP, due)
    released = plan_fire_step(_schedule(OverlapPolicy.BUFFER_ONE, NOW, buffered=due), NOW, False)
    assert (released.action, released.fire_at, released.buffered_fire_at) == (FireAction.SUBMIT, due, None)


def test_a_fire_key_is_stable_and_tells_fires_apart():
    uid = uuid.uuid4()
    assert fire_idempotency_key(uid, NOW) == fire_idempotency_key(uid, NOW.astimezone(NEW_YORK))
    assert fire_idempotency_key(uid, NOW) != fire_idempotency_key(uid, NOW + timedelta(seconds=1))
    assert fire_idempotency_key(uid, NOW) != fire_idempotency_key(uid, NOW, manual=True)


@pytest.mark.parametrize(
    ("cron", "warned"),
    [
        ("*/10 * * * * *", True),  # Quartz's "every 10 s": here every second of every tenth minute
        ("0 */5 * * * *", True),
        ("0 3 * * * */15", True),
        ("0 3 * * * 30", False),
        ("*/10 * * * *", False),
        ("0 3 * * *", False),
    ],
)
def test_a_six_field_expression_that_reads_seconds_first_is_warned_about(cron: str, warned: bool) -> None:
    warning = cron_warning(cron)
    assert bool(warning) is warned
    if warned:
        assert "seconds LAST" in warning and repr(" ".join([*cron.split()[1:], cron.split()[0]])) in warning
