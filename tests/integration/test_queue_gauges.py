"""The gauges read from the database: what the aggregate counts, that it stays off the finished
history, that one session at a time exports, and what a scrape then shows."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from api_service.queue_gauges import QueueGaugeCollector, QueueGaugeRefresher, QueueSnapshot, fold_snapshot
from shared.domain.ids import TenantId
from shared.domain.jobs import JobState
from shared.metric_labels import OTHER_TENANT_LABEL, TenantLabeler, top_tenants
from shared.storage import queries
from shared.storage.queue_stats import METRICS_EXPORTER_LOCK_KEY, ExporterSession, QueueRow
from tests import factories
from tests.db_fixtures import SyncProbe

pytestmark = pytest.mark.timeout(60)

HOUR_SECONDS = 3600.0
HISTORY_ROWS = 20_000


def _arrange(sync_db: SyncProbe, job_id: str, assignments: str) -> None:
    assert sync_db.execute(f"UPDATE jobs SET {assignments} WHERE job_id = %s", (job_id,)) == 1


async def _snapshot_rows(database_url: str, failed_window_seconds: float = HOUR_SECONDS) -> list[QueueRow]:
    session = ExporterSession(database_url)
    try:
        assert await session.try_hold()
        return await session.read_snapshot(failed_window_seconds=failed_window_seconds)
    finally:
        await session.close()


async def test_the_snapshot_counts_open_jobs_and_only_recent_failures(db, database_url, sync_db) -> None:
    acme = await factories.insert_jobs(db, 7, tenant=TenantId("acme"))
    globex = await factories.insert_jobs(db, 2, tenant=TenantId("globex"), kind="sleep", payload=b'{"seconds": 1}')
    _arrange(sync_db, acme[0].job_id, "run_after = clock_timestamp() - interval '90 seconds'")
    _arrange(sync_db, acme[1].job_id, "run_after = clock_timestamp() + interval '1 hour'")
    _arrange(sync_db, acme[2].job_id, "state = 'retry_wait', run_after = clock_timestamp() - interval '30 seconds'")
    _arrange(sync_db, acme[3].job_id, "state = 'outcome_unknown', finished_at = clock_timestamp()")
    _arrange(sync_db, acme[4].job_id, "state = 'failed', finished_at = clock_timestamp() - interval '5 minutes'")
    _arrange(sync_db, acme[5].job_id, "state = 'failed', finished_at = clock_timestamp() - interval '2 hours'")
    _arrange(sync_db, acme[6].job_id, "state = 'succeeded', finished_at = clock_timestamp()")
    _arrange(sync_db, globex[0].job_id, "state = 'blocked', depends_on = ARRAY[job_id]")
    _arrange(
        sync_db,
        globex[1].job_id,
        "state = 'running', lease_owner = 'w', lease_expires_at = clock_timestamp() + interval '1 minute'",
    )

    rows = {(r.tenant, r.kind, r.state): r for r in await _snapshot_rows(database_url)}

    assert {key: row.jobs for key, row in rows.items()} == {
        ("acme", "echo", JobState.PENDING): 2,
        ("acme", "echo", JobState.RETRY_WAIT): 1,
        ("acme", "echo", JobState.OUTCOME_UNKNOWN): 1,
        ("acme", "echo", JobState.FAILED): 1,  # the one from two hours ago is outside the window
        ("globex", "sleep", JobState.BLOCKED): 1,
        ("globex", "sleep", JobState.RUNNING): 1,
    }
    # The job due in an hour is pending but not waiting; the oldest due one waited 90 seconds.
    assert 90 <= (rows["acme", "echo", JobState.PENDING].oldest_wait_seconds or 0) < 120
    assert 30 <= (rows["acme", "echo", JobState.RETRY_WAIT].oldest_wait_seconds or 0) < 60
    assert rows["globex", "sleep", JobState.RUNNING].oldest_wait_seconds is None


async def test_a_job_waiting_for_its_turn_in_a_sequence_is_pending_but_not_in_the_oldest_wait(
    db, database_url, sync_db
) -> None:
    head, waiting = await factories.insert_jobs(db, 2, tenant=TenantId("acme"))
    _arrange(sync_db, head.job_id, "run_after = clock_timestamp() - interval '30 seconds'")
    _arrange(sync_db, waiting.job_id, "run_after = clock_timestamp() - interval '1 hour', parked_on = ''")

    (row,) = await _snapshot_rows(database_url)

    assert (row.state, row.jobs) == (JobState.PENDING, 2)
    assert 30 <= (row.oldest_wait_seconds or 0) < 60


async def test_the_aggregate_reads_partial_indexes_never_the_finished_history(db, database_url, sync_db) -> None:
    sync_db.execute(
        "INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, finished_at)"
        " SELECT 't' || (i %% 7), 'echo', 'succeeded', '', 3, 3, clock_timestamp() - interval '3 hours'"
        " FROM generate_series(1, %s) AS i",
        (HISTORY_ROWS,),
    )
    await factories.insert_jobs(db, 3, tenant=TenantId("acme"))
    sync_db.execute("ANALYZE jobs")

    plan = "\n".join(
        row["QUERY PLAN"]
        for row in sync_db.rows(
            f"EXPLAIN {queries.METRICS_QUEUE_SNAPSHOT}",
            {"failed_window_seconds": HOUR_SECONDS, "lock_key": METRICS_EXPORTER_LOCK_KEY},
        )
    )

    assert "Seq Scan" not in plan, plan
    for index in ("jobs_runnable_idx", "jobs_parked_idx", "jobs_running_lease_idx", "jobs_queue_gauge_idx"):
        assert index in plan, plan


async def test_one_session_exports_at_a_time_and_the_role_passes_on_when_it_closes(database_url) -> None:
    first, second = ExporterSession(database_url), ExporterSession(database_url)
    try:
        assert await first.try_hold()
        assert not await second.try_hold()
        assert await first.try_hold(), "holding is idempotent"
        with pytest.raises(Exception, match="does not hold"):
            await second.read_snapshot(failed_window_seconds=HOUR_SECONDS)
        await first.close()
        # The server frees the lock when the closed session's backend exits, a moment after close().
        await _holds_within(second, seconds=5)
        assert not await first.try_hold()
    finally:
        await first.close()
        await second.close()


async def _holds_within(session: ExporterSession, *, seconds: float) -> None:
    async with asyncio.timeout(seconds):
        # Only the other backend's exit frees the lock, and no event announces it: polling is the signal.
        while not await session.try_hold():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


class FakeClock:
    """The monotonic clock of every replica in a test, moved by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


REFRESH_SECONDS = 10.0
VALID_SECONDS = 2 * REFRESH_SECONDS  # SNAPSHOT_VALID_INTERVALS refresh intervals


class Replicas:
    """Two API replicas' refreshers and collectors on one fake clock; every look at them checks that
    they never export together."""

    def __init__(self, database_url: str, clock: FakeClock) -> None:
        self.collectors = [QueueGaugeCollector(clock=clock), QueueGaugeCollector(clock=clock)]
        self.refreshers = [
            QueueGaugeRefresher(
                ExporterSession(database_url, application_name=f"jobs-tests-exporter-{i}"),
                collector,
                interval_seconds=REFRESH_SECONDS,
                failed_window_seconds=HOUR_SECONDS,
                tenant_limit=5,
                clock=clock,
            )
            for i, collector in enumerate(self.collectors)
        ]

    def exporting(self) -> list[bool]:
        now = [c.exporting for c in self.collectors]
        scraped = [_scrape(c)["jobs_metrics_exporter"] == {"": 1.0} for c in self.collectors]
        assert now == scraped
        assert now != [True, True], "both replicas export the database gauges"
        return now

    async def close(self) -> None:
        for refresher in self.refreshers:
            await refresher._session.close()


async def test_refreshers_of_two_replicas_export_once_and_hand_over(db, database_url) -> None:
    await factories.insert_jobs(db, 2, tenant=TenantId("acme"))
    clock = FakeClock()
    replicas = Replicas(database_url, clock)
    first, second = replicas.refreshers
    try:
        await first.refresh_once()
        await second.refresh_once()
        assert replicas.exporting() == [False, False], "a new exporter waits out any earlier one's snapshot"
        clock.advance(VALID_SECONDS)
        await first.refresh_once()
        await second.refresh_once()
        assert replicas.exporting() == [True, False]
        depth = _scrape(replicas.collectors[0])["jobs_queue_depth"]
        assert depth == {'{kind="echo",state="pending",tenant="acme"}': 2.0}
        assert _scrape(replicas.collectors[1]) == {"jobs_metrics_exporter": {"": 0.0}}

        await first._session.close()  # the exporting replica's database session ends
        await first.refresh_once()  # it may take the lock back: the other has not asked yet
        await second.refresh_once()
        assert replicas.exporting() == [False, False]
    finally:
        await replicas.close()


async def test_a_replica_whose_session_was_killed_stops_exporting_before_another_starts(
    db, database_url, sync_db
) -> None:
    """The exporter's backend is terminated; its replica does not know yet and keeps its snapshot, while
    the other replica takes the freed lock at once. The stale snapshot lapses before the new exporter
    publishes, so at no moment do both export."""
    await factories.insert_jobs(db, 2, tenant=TenantId("acme"))
    clock = FakeClock()
    replicas = Replicas(database_url, clock)
    stale, other = replicas.refreshers
    try:
        await stale.refresh_once()
        clock.advance(VALID_SECONDS)
        await stale.refresh_once()
        await other.refresh_once()
        assert replicas.exporting() == [True, False]

        killed = sync_db.one(
            "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity"
            " WHERE application_name = 'jobs-tests-exporter-0' AND datname = current_database()"
        )
        assert killed["killed"]

        async def other_takes_the_lock() -> None:
            while not other._session.holds_lock:
                await other.refresh_once()
                assert replicas.exporting() == [True, False]

        # The lock is free once the killed backend has exited; nothing announces that but the lock.
        await asyncio.wait_for(other_takes_the_lock(), timeout=10)
        assert replicas.exporting() == [True, False], "the stale replica has not noticed; the other waits"

        clock.advance(VALID_SECONDS / 2)
        await other.refresh_once()
        assert replicas.exporting() == [True, False]
        clock.advance(VALID_SECONDS / 2)
        assert replicas.exporting() == [False, False], "the stale snapshot lapsed without any refresh"
        await other.refresh_once()
        assert replicas.exporting() == [False, True]
        depth = _scrape(replicas.collectors[1])["jobs_queue_depth"]
        assert depth == {'{kind="echo",state="pending",tenant="acme"}': 2.0}

        await stale.refresh_once()  # it learns that its session is gone, and the lock is taken
        assert replicas.exporting() == [False, True]
    finally:
        await replicas.close()


async def test_a_snapshot_read_without_the_lock_is_never_published(db, database_url) -> None:
    """The session's connection is alive but the lock is not held on it (released, or a pooler sent the
    statement to another backend): the old snapshot goes at once and no new one is published."""
    await factories.insert_jobs(db, 1, tenant=TenantId("acme"))
    clock = FakeClock()
    replicas = Replicas(database_url, clock)
    exporter, other = replicas.refreshers
    try:
        await exporter.refresh_once()
        clock.advance(VALID_SECONDS)
        await exporter.refresh_once()
        assert replicas.exporting() == [True, False]

        conn = exporter._session._conn
        assert conn is not None
        await conn.execute("SELECT pg_advisory_unlock(%s)", (METRICS_EXPORTER_LOCK_KEY,))
        await other.refresh_once()  # takes the lock the exporter no longer holds
        assert other._session.holds_lock
        await exporter.refresh_once()
        assert replicas.exporting() == [False, False]
    finally:
        await replicas.close()


async def _exporting(database_url: str) -> tuple[Replicas, QueueGaugeRefresher]:
    """Replicas whose first exports, once its term's wait has passed on a fake clock."""
    clock = FakeClock()
    replicas = Replicas(database_url, clock)
    exporter = replicas.refreshers[0]
    await exporter.refresh_once()
    clock.advance(VALID_SECONDS)
    await exporter.refresh_once()
    return replicas, exporter


async def test_a_paused_kind_is_exported_so_that_alerts_tell_a_pause_from_a_stall(db, database_url, sync_db) -> None:
    await factories.insert_jobs(db, 1, tenant=TenantId("acme"))
    factories.pause_kind(sync_db, "echo")
    replicas, exporter = await _exporting(database_url)
    try:
        assert _scrape(replicas.collectors[0])["jobs_kind_paused"] == {'{kind="echo"}': 1.0}

        sync_db.execute("DELETE FROM kind_pauses")
        await exporter.refresh_once()
        assert "jobs_kind_paused" not in _scrape(replicas.collectors[0])
    finally:
        await replicas.close()


async def test_sequences_halted_by_a_failed_job_are_exported_per_tenant(db, database_url, sync_db) -> None:
    acme = TenantId("acme")
    jobs = await factories.insert_jobs(db, 3, tenant=acme)
    for job, key in zip(jobs, ("doc-a", "doc-a", "doc-b"), strict=True):
        sync_db.execute(
            "UPDATE jobs SET sequence_key = %s, state = 'failed', finished_at = now() WHERE job_id = %s",
            (key, job.job_id),
        )
    replicas, exporter = await _exporting(database_url)
    try:
        assert _scrape(replicas.collectors[0])["jobs_sequences_halted"] == {'{tenant="acme"}': 2.0}

        sync_db.execute(
            "UPDATE jobs SET state = 'cancelled', cancel_requested = true WHERE job_id = %s", (jobs[0].job_id,)
        )
        sync_db.execute(
            "UPDATE jobs SET state = 'cancelled', cancel_requested = true WHERE job_id = %s", (jobs[1].job_id,)
        )
        await exporter.refresh_once()
        assert _scrape(replicas.collectors[0])["jobs_sequences_halted"] == {'{tenant="acme"}': 1.0}
    finally:
        await replicas.close()


def _scrape(collector: QueueGaugeCollector) -> dict[str, dict[str, float]]:
    """{metric: {labels: value}} as a scrape of a registry holding only `collector` shows them."""
    registry = CollectorRegistry()
    registry.register(collector)
    found: dict[str, dict[str, float]] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        name, brace, labels = sample.partition("{")
        found.setdefault(name, {})[brace + labels] = float(value)
    return found


def test_a_label_set_gone_from_the_database_is_gone_from_the_next_scrape() -> None:
    clock = FakeClock(100.0)
    collector = QueueGaugeCollector(clock=clock)
    collector.publish(
        QueueSnapshot({("acme", "echo", "pending"): 3, ("globex", "echo", "running"): 1}, {("acme", "echo"): 4.0}, {}),
        as_of=95.0,
        valid_until=200.0,
    )
    first = _scrape(collector)
    clock.now = 107.5
    collector.publish(
        QueueSnapshot({("acme", "echo", "pending"): 1}, {}, {("acme", "echo"): 2}), as_of=105.0, valid_until=200.0
    )
    second = _scrape(collector)

    assert first["jobs_queue_depth"] == {
        '{kind="echo",state="pending",tenant="acme"}': 3.0,
        '{kind="echo",state="running",tenant="globex"}': 1.0,
    }
    assert first["jobs_oldest_wait_seconds"] == {'{kind="echo",tenant="acme"}': 4.0}
    assert first["jobs_metrics_snapshot_age_seconds"] == {"": 5.0}
    assert second["jobs_queue_depth"] == {'{kind="echo",state="pending",tenant="acme"}': 1.0}
    assert "jobs_oldest_wait_seconds" not in second
    assert second["jobs_recently_failed"] == {'{kind="echo",tenant="acme"}': 2.0}
    assert second["jobs_metrics_snapshot_age_seconds"] == {"": 2.5}
    assert first["jobs_metrics_exporter"] == second["jobs_metrics_exporter"] == {"": 1.0}

    clock.now = 200.0
    assert _scrape(collector) == {"jobs_metrics_exporter": {"": 0.0}}, "a lapsed snapshot is not exported"
    collector.publish(QueueSnapshot({}, {}, {}), as_of=200.0, valid_until=210.0)
    collector.withdraw()
    assert _scrape(collector) == {"jobs_metrics_exporter": {"": 0.0}}


def test_the_snapshot_names_the_busiest_tenants_and_folds_the_rest_into_other() -> None:
    rows = [
        QueueRow("big", "echo", JobState.PENDING, 50, 10.0),
        QueueRow("mid", "echo", JobState.PENDING, 20, 40.0),
        QueueRow("small", "echo", JobState.PENDING, 2, 300.0),
        QueueRow("tiny", "echo", JobState.PENDING, 1, 5.0),
        QueueRow("tiny", "echo", JobState.FAILED, 4, None),
        QueueRow("small", "echo", JobState.OUTCOME_UNKNOWN, 1, None),
    ]
    snapshot = fold_snapshot(rows, tenant_limit=2)
    assert snapshot.depth == {
        ("big", "echo", "pending"): 50,
        ("mid", "echo", "pending"): 20,
        (OTHER_TENANT_LABEL, "echo", "pending"): 3,
        (OTHER_TENANT_LABEL, "echo", "outcome_unknown"): 1,
    }
    assert snapshot.oldest_wait_seconds == {
        ("big", "echo"): 10.0,
        ("mid", "echo"): 40.0,
        (OTHER_TENANT_LABEL, "echo"): 300.0,
    }
    assert snapshot.recently_failed == {(OTHER_TENANT_LABEL, "echo"): 4}


def test_tenant_labels_stay_bounded() -> None:
    assert top_tenants({"a": 1, "b": 5, "c": 5, "d": 0}, 2) == {"b", "c"}
    assert top_tenants({"b": 1, "a": 1, "c": 1}, 2) == {"a", "b"}, "ties go to the alphabetically first"
    labeler = TenantLabeler(2)
    assert [labeler(t) for t in ("a", "b", "c", "a", "d")] == ["a", "b", OTHER_TENANT_LABEL, "a", OTHER_TENANT_LABEL]
