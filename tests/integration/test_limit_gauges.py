"""The gauges per limited key: running against the limit, and the runnable jobs a full or held key holds
back, read by the one exporter session with the lock's proof."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from api_service.queue_gauges import QueueGaugeCollector, QueueSnapshot
from shared.domain.ids import TenantId
from shared.storage import scheduling_store
from shared.storage.queue_stats import ExporterSession, LimitRow
from tests import factories

pytestmark = pytest.mark.timeout(60)


async def _limit_rows(database_url: str) -> dict[str, LimitRow]:
    session = ExporterSession(database_url)
    try:
        assert await session.try_hold()
        return {row.key: row for row in await session.read_limits()}
    finally:
        await session.close()


async def test_a_full_key_shows_its_running_jobs_and_the_ones_it_holds_back(db, database_url, sync_db) -> None:
    factories.declare_kind_keys(sync_db, "sleep", ["provider:x"])
    factories.set_limit(sync_db, "provider:x", max_running=2)
    factories.set_limit(sync_db, "kind:echo", max_running=50)
    await factories.insert_jobs(db, 5, kind="sleep")
    await factories.insert_jobs(db, 3, tenant=TenantId("acme"))
    own = await factories.insert_job(db, tenant=TenantId("acme"))
    factories.add_own_keys(sync_db, own.job_id, ["tenant:acme/doc:1"], [1])
    await factories.claim(db, kinds=("sleep",), limit=10)
    async with db.transaction() as conn:
        await scheduling_store.hold_key(conn, "tenant:acme/doc:1", datetime.now(UTC) + timedelta(hours=1))

    rows = await _limit_rows(database_url)

    assert rows["provider:x"] == LimitRow("provider:x", 2, 2, 3, True)
    assert rows["kind:echo"] == LimitRow("kind:echo", 50, 0, 4, False)
    assert rows["tenant:acme/doc:1"] == LimitRow("tenant:acme/doc:1", 0, 0, 1, True)


async def test_a_scrape_shows_throttled_jobs_only_for_a_key_without_room() -> None:
    collector = QueueGaugeCollector(clock=lambda: 0.0)
    limits = (LimitRow("provider:x", 2, 2, 3, True), LimitRow("kind:echo", 50, 0, 4, False))
    collector.publish(QueueSnapshot({}, {}, {}, limits), 0.0, valid_until=10.0)
    registry = CollectorRegistry()
    registry.register(collector)

    text = generate_latest(registry).decode()

    assert 'jobs_limit_throttled{key="provider:x"} 3.0' in text
    assert 'jobs_limit_throttled{key="kind:echo"} 0.0' in text
    assert 'jobs_limit_running{key="provider:x"} 2.0' in text
    assert 'jobs_limit_max_running{key="provider:x"} 2.0' in text
    assert 'jobs_limit_saturated{key="provider:x"} 1.0' in text
