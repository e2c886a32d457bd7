"""The database machine is lost, or hangs, and a standby takes over: nothing acknowledged is lost.

A pg_auto_failover formation of the test's own (monitor, primary, synchronous secondary) serves the real
API and two workers over a multi-host URL with target_session_attrs=read-write. Clients keep submitting
with idempotency keys (resubmitting indeterminate answers with the same key) while the workers complete
the jobs; then every process of the primary (keeper, PostgreSQL, backends) is either killed with SIGKILL
or frozen with SIGSTOP, its connections left open and silent. After the promotion every acknowledged job
exists exactly once and succeeds, no result is published twice, and the same service processes serve
from the new primary; after a freeze, within ten seconds of the promotion. Before that, in process: a
pooled connection to a server that stopped taking writes is replaced rather than kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobs.v1 import jobs_pb2
from shared.domain.errors import Unavailable
from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import migrate
from tests.acknowledged_load import (
    OPEN_JOBS,
    TERMINAL,
    Audit,
    Ledger,
    audit,
    client_loop,
    count,
    create_service_logins,
)
from tests.auto_failover import Formation, Node
from tests.process_fixtures import ServiceStack, free_port, wait_until

CLIENTS = 4
CLIENT_PAUSE_SECONDS = 0.02
# Acknowledged jobs before the fault, and after the promotion, so both sides of the failover carry load.
ACKS_BEFORE_FAULT = 150
ACKS_AFTER_PROMOTION = 150
# Generous bounds for a busy two-core machine; the waits end as soon as their condition holds.
PHASE_TIMEOUT_SECONDS = 120
SETTLE_SECONDS = 120
VISIBLY_WAITING = ("pending", "blocked", "running", "retry_wait", "outcome_unknown")
POLL_SECONDS = 0.2
# What users are promised after a primary hangs: the service is back within this long of the promotion.
FIRST_ACKNOWLEDGMENT_AFTER_PROMOTION_SECONDS = 10.0


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


class HealthLog:
    """The API's readiness as a kubelet would see it, polled on a thread: each change, with its time."""

    def __init__(self, stack: ServiceStack) -> None:
        self._stub = health_pb2_grpc.HealthStub(stack.channel())
        self.changes: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="health-log", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                answer = self._stub.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
            except grpc.RpcError:
                status = "UNREACHABLE"
            if not self.changes or self.changes[-1][1] != status:
                self.changes.append((time.monotonic(), status))

    def first(self, status: str, since: float) -> float | None:
        return next((at for at, seen in self.changes if seen == status and at >= since), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class FailoverRun:
    """What a failover under load looked like from outside."""

    old_primary: Node
    new_primary: Node
    faulted_at: float  # monotonic, when the old primary was killed or frozen
    promoted_at: float  # when the new primary first took a write (polled every POLL_SECONDS)
    first_acknowledged_at: float | None  # the first acknowledgment at or after the promotion
    ledger: Ledger
    health: HealthLog
    found: Audit | None = None
    api_log: str = ""

    @property
    def outage_codes(self) -> dict[str, int]:
        """Indeterminate answers from the fault until service returned, by status code."""
        return self.ledger.indeterminate_codes(self.faulted_at, self._outage_end)

    @property
    def _outage_end(self) -> float:
        return self.first_acknowledged_at or float("inf")

    def summary(self, fault: str) -> str:
        """The figures a failover run is reported by."""
        acknowledged = dict(self.ledger.acknowledged)
        during = [
            a for a in acknowledged.values() if a.first_sent < self.promoted_at and a.acknowledged_at >= self.faulted_at
        ]
        waits = self.ledger.indeterminate_waits(self.faulted_at, self._outage_end)
        not_serving = self.health.first("NOT_SERVING", self.faulted_at)
        serving = self.health.first("SERVING", not_serving or self.faulted_at)
        lines = [
            f"failover after a {fault} of {self.old_primary.name}: {self.new_primary.name} promoted after "
            f"{self.promoted_at - self.faulted_at:.1f}s, first acknowledgment "
            + _after(self.first_acknowledged_at, self.promoted_at, "the promotion"),
            f"  indeterminate answers during the outage {self.outage_codes}, each after "
            + (f"{waits[len(waits) // 2]:.1f}s (median), {waits[-1]:.1f}s at most" if waits else "-"),
            f"  health NOT_SERVING {_after(not_serving, self.faulted_at, 'the fault')}, SERVING again "
            + _after(serving, self.promoted_at, "the promotion"),
        ]
        if self.found is not None:
            lines.append(
                f"  acknowledged {len(acknowledged)} (during the failover {len(during)}), client retries "
                f"{self.ledger.retries}, lost {len(self.found.lost)}, not succeeded {len(self.found.not_succeeded)}, "
                f"results published twice {self.found.published_twice}, seconds without service "
                f"{_longest_gap([a.acknowledged_at for a in acknowledged.values()]):.1f}; rows {len(self.found.rows)}, "
                f"results {self.found.results}"
            )
        return "\n" + "\n".join(lines)


def _after(moment: float | None, since: float, what: str) -> str:
    return "never" if moment is None else f"{moment - since:.1f}s after {what}"


def _run_failover(
    formation: Formation,
    stack: ServiceStack,
    fault: Callable[[Node], None],
    capsys: pytest.CaptureFixture[str],
    *,
    first_acknowledgment_seconds: float,
) -> FailoverRun:
    """Serves clients from the formation, applies `fault` to the primary under load, waits for the promotion
    and for service from the new primary, and audits every acknowledged job once all have ended. Checks
    that the same processes serve throughout, and that the new primary carries their listeners."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    run: FailoverRun | None = None
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
            lambda: ledger.count() >= ACKS_BEFORE_FAULT,
            timeout=PHASE_TIMEOUT_SECONDS,
            interval=0.1,
            what=f"{ACKS_BEFORE_FAULT} acknowledged submissions",
        )

        old_primary = formation.primary()
        assert old_primary is not None
        (new_primary,) = [node for node in formation.nodes if node is not old_primary]
        health = HealthLog(stack)
        faulted_at = time.monotonic()
        fault(old_primary)
        wait_until(
            lambda: formation.writable(new_primary),
            timeout=PHASE_TIMEOUT_SECONDS,
            interval=POLL_SECONDS,
            what="the secondary to be promoted",
        )
        promoted_at = time.monotonic()
        run = FailoverRun(old_primary, new_primary, faulted_at, promoted_at, None, ledger, health)
        wait_until(
            lambda: ledger.count(since=promoted_at) > 0,
            timeout=first_acknowledgment_seconds,
            interval=POLL_SECONDS,
            what=f"an acknowledgment within {first_acknowledgment_seconds:.0f}s of the promotion",
        )
        run.first_acknowledged_at = ledger.first_acknowledged(promoted_at)
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
        health.stop()

        new_primary_url = formation.admin_url(new_primary)
        wait_until(
            lambda: count(new_primary_url, OPEN_JOBS) == 0,
            timeout=SETTLE_SECONDS,
            interval=0.5,
            what="every job to reach a terminal state",
        )
        # The same processes serve from the new primary, wake-ups and WatchJob listening there again.
        for process in [api, *workers]:
            assert process.popen.poll() is None, f"{process.name} exited"
        listeners = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobs-listener'"
        wait_until(
            lambda: count(new_primary_url, listeners) == 3,
            timeout=60,
            interval=0.5,
            what="the API's and both workers' listeners on the new primary",
        )
        client = stack.tenant("acme")
        after = client.submit("echo", b"after the failover", idempotency_key="after").job.job_id
        stream = client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=after), metadata=client.metadata, timeout=60)
        assert [m.state for m in stream][-1] == jobs_pb2.JOB_STATE_SUCCEEDED
        run.found = audit(new_primary_url, ledger)
        run.api_log = api.log_text()
        return run
    finally:
        stop.set()
        if run is not None:
            run.health.stop()
            # Printed past pytest's capture, failed or not: these figures are what a failover run is reported by.
            with capsys.disabled():
                print(run.summary(fault.__name__))
        stack.close()
        for process in stack.processes:
            print(f"\n----- {process.name} log (tail) -----\n{process.log_text()[-1500:]}")


def _check_nothing_lost(run: FailoverRun) -> None:
    found = run.found
    assert found is not None
    assert run.ledger.unexpected == []
    assert found.lost == []
    assert found.not_succeeded == []
    assert found.unsettled == [] and all(state in TERMINAL + VISIBLY_WAITING for _, _, _, state in found.rows)
    assert found.published_twice == 0 and found.results == found.succeeded
    # Readiness told the kubelet while the database could not be written.
    assert run.health.first("NOT_SERVING", run.faulted_at) is not None
    # An answer nobody waits for any more is not an error of the process.
    assert "Future exception was never retrieved" not in run.api_log


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_losing_the_primary_loses_no_acknowledged_job_and_publishes_nothing_twice(
    formation: Formation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_url = _prepare(formation)
    run = _run_failover(
        formation,
        ServiceStack(owner_url, tmp_path),
        formation.kill,
        capsys,
        first_acknowledgment_seconds=PHASE_TIMEOUT_SECONDS,
    )
    _check_nothing_lost(run)
    during = [
        ack
        for ack in run.ledger.acknowledged.values()
        if ack.first_sent < run.promoted_at and ack.acknowledged_at >= run.faulted_at
    ]
    assert during, "some submissions should have been answered across the failover"


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_frozen_primary_is_left_behind_without_restarting_anything(
    formation: Formation, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The primary hangs instead of dying: every process of it stopped, its connections open and silent.
    The services must give up on it by themselves, and serve from the promoted standby within ten seconds
    of the promotion."""
    owner_url = _prepare(formation)
    run = _run_failover(
        formation,
        ServiceStack(owner_url, tmp_path),
        formation.freeze,
        capsys,
        first_acknowledgment_seconds=FIRST_ACKNOWLEDGMENT_AFTER_PROMOTION_SECONDS,
    )
    _check_nothing_lost(run)
