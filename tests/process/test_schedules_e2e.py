"""Schedules over real API processes and a real database: one job per fire time however many replicas
fire, pause and resume, trigger now, overlap policies, the catch-up window after downtime."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import grpc
import pytest

from jobs.v1 import jobs_pb2
from shared.rpc_error_details import rpc_error_details
from tests.process_fixtures import ServiceStack, TenantClient, free_port, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

FAST_SCHEDULER = {"JOBS_SCHEDULER_POLL_SECONDS": "0.1"}
EVERY_SECOND = "* * * * * *"
WAIT_SECONDS = 60.0


def _create(client: TenantClient, schedule_id: str, **fields) -> jobs_pb2.Schedule:
    fields.setdefault("job", jobs_pb2.SubmitJobRequest(kind="echo", payload=b"tick"))
    fields.setdefault("cron", EVERY_SECOND)
    request = jobs_pb2.CreateScheduleRequest(schedule_id=schedule_id, **fields)
    return client.stub.CreateSchedule(request, metadata=client.metadata, timeout=10)


def _get(client: TenantClient, schedule_id: str) -> jobs_pb2.Schedule:
    request = jobs_pb2.GetScheduleRequest(schedule_id=schedule_id)
    return client.stub.GetSchedule(request, metadata=client.metadata, timeout=10)


def _fires(sync_db, schedule_id: str) -> list[dict]:
    """The schedule's jobs, each with the fire time its idempotency key names, in fire order."""
    rows = sync_db.rows(
        """SELECT j.job_id, j.state, j.created_at, j.idempotency_key
           FROM jobs AS j JOIN schedules AS s ON j.idempotency_key LIKE 'schedule:' || s.schedule_uid || ':%%'
           WHERE s.schedule_id = %s AND j.idempotency_key NOT LIKE '%%:manual:%%'""",
        (schedule_id,),
    )
    for row in rows:
        stamp = row["idempotency_key"].rsplit(":", 1)[1]
        row["fire_at"] = datetime.strptime(stamp, "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
    return sorted(rows, key=lambda row: row["fire_at"])


def _has_fires(sync_db, schedule_id: str, count: int) -> Callable[[], bool]:
    return lambda: len(_fires(sync_db, schedule_id)) >= count


def _has_skips(client: TenantClient, schedule_id: str, count: int) -> Callable[[], bool]:
    return lambda: _get(client, schedule_id).fires_skipped >= count


def _db_now(sync_db) -> datetime:
    return sync_db.one("SELECT clock_timestamp() AS now")["now"]


def test_two_api_replicas_fire_exactly_one_job_per_schedule_and_fire_time(service_stack: ServiceStack, sync_db):
    service_stack.start_api("api-a", **FAST_SCHEDULER)
    service_stack.start_api("api-b", JOBS_API_LISTEN=f"127.0.0.1:{free_port()}", **FAST_SCHEDULER)
    acme = service_stack.tenant("acme")
    ids = [f"every-second-{n}" for n in range(3)]
    for schedule_id in ids:
        _create(acme, schedule_id, overlap_policy=jobs_pb2.SCHEDULE_OVERLAP_POLICY_ALLOW)
    for schedule_id in ids:
        wait_until(_has_fires(sync_db, schedule_id, 8), timeout=WAIT_SECONDS, what="8 fires each")
        acme.stub.PauseSchedule(jobs_pb2.PauseScheduleRequest(schedule_id=schedule_id), metadata=acme.metadata)
    for schedule_id in ids:
        fires = _fires(sync_db, schedule_id)
        times = [f["fire_at"] for f in fires]
        assert len(set(times)) == len(times), "a fire time got two jobs"
        steps = {(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)}
        assert steps == {1.0}, f"fire times are not every second without a gap: {times}"
        recorded = sync_db.one(
            """SELECT count(*) AS n, count(DISTINCT f.job_id) AS jobs FROM schedule_fires AS f
               JOIN schedules AS s USING (schedule_uid) WHERE s.schedule_id = %s AND f.outcome = 'submitted'""",
            (schedule_id,),
        )
        assert recorded == {"n": len(fires), "jobs": len(fires)}
        assert _get(acme, schedule_id).fires_submitted == len(fires)
    fired_by = [p.name for p in service_stack.processes if "fired for" in p.log_text()]
    lateness = sorted(
        (f["created_at"] - f["fire_at"]).total_seconds() for schedule_id in ids for f in _fires(sync_db, schedule_id)
    )
    # Reported, not asserted (a busy machine decides it): how long after its fire time a job was stored.
    print(
        f"replicas that fired: {fired_by}; lateness median {lateness[len(lateness) // 2]:.3f}s, max {lateness[-1]:.3f}s"
    )


def test_pause_stops_the_fires_resume_starts_them_and_trigger_fires_at_once(service_stack: ServiceStack, sync_db):
    service_stack.start_api(**FAST_SCHEDULER)
    acme = service_stack.tenant("acme")
    _create(acme, "ticker", overlap_policy=jobs_pb2.SCHEDULE_OVERLAP_POLICY_ALLOW)
    wait_until(lambda: _fires(sync_db, "ticker"), timeout=WAIT_SECONDS, what="a first fire")
    paused = acme.stub.PauseSchedule(
        jobs_pb2.PauseScheduleRequest(schedule_id="ticker", note="maintenance"), metadata=acme.metadata
    )
    assert paused.paused and paused.note == "maintenance"
    count_at_pause = len(_fires(sync_db, "ticker"))
    # Three cron times pass by the database's clock while paused; none fires.
    passed = paused.next_fire_at.ToDatetime(tzinfo=UTC).timestamp() + 3
    wait_until(lambda: _db_now(sync_db).timestamp() > passed, timeout=WAIT_SECONDS, what="three fire times")
    assert len(_fires(sync_db, "ticker")) == count_at_pause

    triggered = acme.stub.TriggerSchedule(
        jobs_pb2.TriggerScheduleRequest(schedule_id="ticker"), metadata=acme.metadata, timeout=10
    )
    assert triggered.job.kind == "echo" and ":manual:" in triggered.job.idempotency_key
    assert triggered.schedule.last_job_id == triggered.job.job_id and triggered.schedule.paused
    assert len(_fires(sync_db, "ticker")) == count_at_pause

    resumed = acme.stub.ResumeSchedule(jobs_pb2.ResumeScheduleRequest(schedule_id="ticker"), metadata=acme.metadata)
    assert not resumed.paused
    wait_until(
        lambda: len(_fires(sync_db, "ticker")) > count_at_pause, timeout=WAIT_SECONDS, what="a fire after resume"
    )
    resumed_fires = [f["fire_at"] for f in _fires(sync_db, "ticker")][count_at_pause:]
    assert min(resumed_fires) >= resumed.next_fire_at.ToDatetime(tzinfo=UTC), (
        "a time that passed while paused was fired"
    )


def test_overlap_policies_while_the_previous_fire_has_not_ended(service_stack: ServiceStack, sync_db):
    # No worker runs: every fire's job stays PENDING, which is "not ended" for the next fire.
    service_stack.start_api(**FAST_SCHEDULER)
    acme = service_stack.tenant("acme")
    policies = {
        "skip": jobs_pb2.SCHEDULE_OVERLAP_POLICY_SKIP,
        "buffer": jobs_pb2.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
        "allow": jobs_pb2.SCHEDULE_OVERLAP_POLICY_ALLOW,
    }
    sleep_job = jobs_pb2.SubmitJobRequest(kind="sleep", payload=b'{"seconds": 60}')
    for schedule_id, policy in policies.items():
        _create(acme, schedule_id, overlap_policy=policy, job=sleep_job)
    wait_until(lambda: len(_fires(sync_db, "allow")) >= 4, timeout=WAIT_SECONDS, what="4 fires allowed")
    for schedule_id in ("skip", "buffer"):
        wait_until(_has_skips(acme, schedule_id, 2), timeout=WAIT_SECONDS, what="skips")
    assert len(_fires(sync_db, "skip")) == 1
    assert len(_fires(sync_db, "buffer")) == 1
    buffered = _get(acme, "buffer")
    assert buffered.HasField("buffered_fire_at")
    first_job = _fires(sync_db, "buffer")[0]["job_id"]

    acme.stub.CancelJob(jobs_pb2.CancelJobRequest(job_id=str(first_job)), metadata=acme.metadata)
    wait_until(lambda: len(_fires(sync_db, "buffer")) >= 2, timeout=WAIT_SECONDS, what="the buffered fire")
    second = _fires(sync_db, "buffer")[1]
    assert second["fire_at"] == buffered.buffered_fire_at.ToDatetime(tzinfo=UTC), (
        "the buffered fire is not the one kept"
    )
    assert _get(acme, "buffer").last_job_id == str(second["job_id"])


def test_fires_older_than_the_catch_up_window_are_missed_after_downtime(service_stack: ServiceStack, sync_db):
    window = 5
    api = service_stack.start_api(**FAST_SCHEDULER)
    acme = service_stack.tenant("acme")
    _create(acme, "nightly", catchup_window_seconds=window, overlap_policy=jobs_pb2.SCHEDULE_OVERLAP_POLICY_ALLOW)
    wait_until(lambda: _fires(sync_db, "nightly"), timeout=WAIT_SECONDS, what="a first fire")
    api.stop()
    before_downtime = len(_fires(sync_db, "nightly"))
    # The scheduler was down for an hour: its next fire time lies an hour back.
    sync_db.execute("UPDATE schedules SET next_fire_at = next_fire_at - interval '1 hour'")
    restarted_at = _db_now(sync_db)
    restarted = service_stack.start_api(**FAST_SCHEDULER)

    def caught_up_schedule() -> jobs_pb2.Schedule | None:
        found = _get(acme, "nightly")
        return found if found.next_fire_at.ToDatetime(tzinfo=UTC) > restarted_at else None

    caught_up = wait_until(caught_up_schedule, timeout=WAIT_SECONDS, what="the catch-up")
    assert caught_up.fires_missed >= 3600 - window - 2
    assert restarted.metric_value("jobs_schedule_fires_total", {"outcome": "missed"}) >= caught_up.fires_missed
    after = _fires(sync_db, "nightly")[before_downtime:]
    assert after, "nothing inside the window fired"
    oldest_allowed = restarted_at.timestamp() - window - 1
    assert all(f["fire_at"].timestamp() >= oldest_allowed for f in after), "a fire older than the window ran"
    # One record per catch-up step that missed fires, naming how many (a fire that the window passes
    # while the catch-up runs is missed by a later step).
    missed = sync_db.rows("SELECT detail FROM schedule_fires WHERE outcome = 'missed'")
    assert sum(int(row["detail"].split()[0]) for row in missed) >= caught_up.fires_missed


def _field_violations(error: grpc.RpcError) -> list[str]:
    details = rpc_error_details(error)
    assert details is not None, error.details()
    return [field for field, _ in details.field_violations]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (dict(cron="61 * * * *"), "cron"),
        (dict(cron="0 3 * * *", time_zone="Mars/Olympus"), "time_zone"),
        (dict(job=jobs_pb2.SubmitJobRequest(kind="no-such-kind")), "job.kind"),
        (dict(job=jobs_pb2.SubmitJobRequest(kind="echo", idempotency_key="k")), "job.idempotency_key"),
        (dict(schedule_id="Has Spaces"), "schedule_id"),
    ],
)
def test_bad_schedules_are_invalid_argument_naming_the_field(service_stack: ServiceStack, fields, field):
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    acme = service_stack.tenant("acme")
    with pytest.raises(grpc.RpcError) as refused:
        _create(acme, fields.pop("schedule_id", "bad"), **fields)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field_violations(refused.value) == [field]


def test_schedules_are_walled_by_tenant_and_deleted_for_good(service_stack: ServiceStack):
    service_stack.start_api(JOBS_SCHEDULER_ENABLED="false")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    _create(acme, "report", cron="0 3 * * *", time_zone="Europe/Berlin")
    with pytest.raises(grpc.RpcError) as exists:
        _create(acme, "report", cron="0 3 * * *")
    assert exists.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.RpcError) as hidden:
        _get(globex, "report")
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    assert _create(globex, "report", cron="0 4 * * *").cron == "0 4 * * *"
    listed = acme.stub.ListSchedules(jobs_pb2.ListSchedulesRequest(), metadata=acme.metadata)
    assert [s.schedule_id for s in listed.schedules] == ["report"]
    acme.stub.DeleteSchedule(jobs_pb2.DeleteScheduleRequest(schedule_id="report"), metadata=acme.metadata)
    with pytest.raises(grpc.RpcError) as gone:
        _get(acme, "report")
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert _get(globex, "report").schedule_id == "report"
