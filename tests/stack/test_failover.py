"""The database machine is lost and a standby takes over: nothing acknowledged is lost.

A pg_auto_failover formation of the test's own (monitor, primary, synchronous secondary) serves the real
API and two workers over a multi-host URL with target_session_attrs=read-write. Clients keep submitting
with idempotency keys (resubmitting indeterminate answers with the same key) while the workers complete
the jobs; then the primary's keeper, PostgreSQL and backends are killed with SIGKILL at once. After the
promotion every acknowledged job exists exactly once and succeeds, no result is published twice, and the
same service processes serve from the new primary. Before that, in process: a pooled connection to a
server that stopped taking writes is replaced rather than kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.v1 import jobs_pb2
from shared.domain.errors import Unavailable
from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import migrate
from tests.acknowledged_load import OPEN_JOBS, TERMINAL, Ledger, audit, client_loop, count, create_service_logins
from tests.auto_failover import Formation, Node
from tests.process_fixtures import ServiceStack, free_port, wait_until

CLIENTS = 4
CLIENT_PAUSE_SECONDS = 0.02
# Acknowledged jobs before the kill, and after the promotion, so both sides of the failover carry load.
ACKS_BEFORE_KILL = 150
ACKS_AFTER_PROMOTION = 150
# Generous bounds for a busy two-core machine; the waits end as soon as their condition holds.
PHASE_TIMEOUT_SECONDS = 120
SETTLE_SECONDS = 120
VISIBLY_WAITING = ("pending", "blocked", "running", "retry_wait", "outcome_unknown")


async def test_a_pooled_connection_to_a_server_that_stopped_taking_writes_is_replaced(database_url: str) -> None:
    """pg_auto_failover fences a node by turning default_transaction_read_only on (as operators do before
    a switchover); the pool must not keep handing out a connection on which every write fails."""
    db = await Database.open(PoolSettings(database_url, min_size=1, max_size=1), wait=True)
    try:
        async with db.transaction() as conn:
            fenced_pid = (await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone())["pid"]
            await conn.execute("SET SESSION default_transaction_read_only = on")
        with pytest.raises(Unavailable):
            async with db.transaction() as conn:
                await conn.execute("UPDATE jobs SET priority = priority WHERE false")
        async with db.transaction() as conn:
            row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
            await conn.execute("UPDATE jobs SET priority = priority WHERE false")
        assert row["pid"] != fenced_pid
    finally:
        await db.close()


@pytest.fixture
def formation() -> Iterator[Formation]:
    cluster = Formation(free_port(), (free_port(), free_port()))
    try:
        cluster.start()
        yield cluster
    finally:
        for node in [cluster.monitor, *cluster.nodes]:
            print(f"\n----- {node.name} (tail) -----\n{cluster.log_tail(node, 1200)}")
        cluster.destroy()


def _prepare(formation: Formation) -> str:
    """Migrates the formation's database and creates the services' least-privileged logins on the
    primary (the standby receives both by replication); returns the owner's multi-host URL."""
    primary = formation.primary()
    assert primary is not None
    migrate(formation.admin_url(primary))
    create_service_logins(formation.admin_url(primary))
    return formation.url("postgres")


def _longest_gap(times: list[float]) -> float:
    ordered = sorted(times)
    return max((b - a for a, b in zip(ordered, ordered[1:], strict=False)), default=0.0)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_losing_the_primary_loses_no_acknowledged_job_and_publishes_nothing_twice(
    formation: Formation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_url = _prepare(formation)
    stack = ServiceStack(owner_url, tmp_path)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        api = stack.start_api(DATABASE_URL=formation.url("api_login"), JOBS_DB_ACQUIRE_TIMEOUT_SECONDS="1")
        workers = [
            stack.start_worker(name, DATABASE_URL=formation.url("worker_login"), JOBS_WORKER_CONCURRENCY="8")
            for name in ("w1", "w2")
        ]
        ledger = Ledger()
        threads = [
            threading.Thread(
                target=client_loop,
                args=(stack, i, lambda: not stop.is_set(), ledger, CLIENT_PAUSE_SECONDS),
                daemon=True,
            )
            for i in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        wait_until(
            lambda: ledger.count() >= ACKS_BEFORE_KILL,
            timeout=PHASE_TIMEOUT_SECONDS,
            interval=0.1,
            what=f"{ACKS_BEFORE_KILL} acknowledged submissions",
        )

        old_primary = formation.primary()
        assert old_primary is not None
        killed_at = time.monotonic()
        formation.kill(old_primary)
        new_primary = wait_until(
            lambda: (node := formation.primary()) is not None and node is not old_primary and node,
            timeout=PHASE_TIMEOUT_SECONDS,
            interval=0.2,
            what="the secondary to be promoted",
        )
        promoted_at = time.monotonic()
        assert isinstance(new_primary, Node)
        wait_until(
            lambda: ledger.count(since=promoted_at) >= ACKS_AFTER_PROMOTION,
            timeout=PHASE_TIMEOUT_SECONDS,
            interval=0.1,
            what=f"{ACKS_AFTER_PROMOTION} acknowledgments from the new primary",
        )
        stop.set()
        for thread in threads:
            thread.join(PHASE_TIMEOUT_SECONDS)
            assert not thread.is_alive(), thread.name

        wait_until(
            lambda: count(owner_url, OPEN_JOBS) == 0,
            timeout=SETTLE_SECONDS,
            interval=0.5,
            what="every job to reach a terminal state",
        )
        found = audit(owner_url, ledger)
        acknowledged = dict(ledger.acknowledged)
        during = [
            k for k, ack in acknowledged.items() if ack.first_sent < promoted_at and ack.acknowledged_at >= killed_at
        ]
        without_service = _longest_gap([ack.acknowledged_at for ack in acknowledged.values()])

        # Printed past pytest's capture: these counts are what a failover run is reported by.
        with capsys.disabled():
            print(
                f"\nfailover: {old_primary.name} killed, {new_primary.name} promoted after "
                f"{promoted_at - killed_at:.1f}s; acknowledged {len(acknowledged)} "
                f"(during the failover {len(during)}), client retries {ledger.retries}, lost {len(found.lost)}, "
                f"not succeeded {len(found.not_succeeded)}, results published twice {found.published_twice}, "
                f"seconds without service {without_service:.1f}; rows {len(found.rows)}, results {found.results}"
            )
        assert ledger.unexpected == []
        assert found.lost == []
        assert found.not_succeeded == []
        assert found.unsettled == [] and all(state in TERMINAL + VISIBLY_WAITING for _, _, _, state in found.rows)
        assert found.published_twice == 0 and found.results == found.succeeded
        assert during, "some submissions should have been answered across the failover"

        # The same processes serve from the new primary, wake-ups and WatchJob listening there again.
        for process in [api, *workers]:
            assert process.popen.poll() is None, f"{process.name} exited"
        listeners = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobs-listener'"
        wait_until(
            lambda: count(formation.admin_url(new_primary), listeners) == 3,
            timeout=60,
            interval=0.5,
            what="the API's and both workers' listeners on the new primary",
        )
        client = stack.tenant("acme")
        after = client.submit("echo", b"after the failover", idempotency_key="after").job.job_id
        stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=after), metadata=client.metadata, timeout=60)
        assert [m.state for m in stream][-1] == jobs_pb2.JOB_STATE_SUCCEEDED
    finally:
        stop.set()
        stack.close()
        for process in stack.processes:
            print(f"\n----- {process.name} log (tail) -----\n{process.log_text()[-1500:]}")
