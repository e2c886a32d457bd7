"""PostgreSQL crashes and restarts, or stalls, under load, on a private server the test starts itself.

For two minutes several clients submit with idempotency keys (retrying indeterminate answers with the
same key) while two workers run the jobs. Meanwhile the server is stopped with `immediate` (a crash)
and started again, and every session is killed with pg_terminate_backend. Afterwards every job that was
acknowledged OK exists exactly once and has succeeded, no job has two published results, health said
NOT_SERVING while the database was down, and the same service processes serve again without a restart.

A stall is the other way a database goes away: every process of the server stopped (SIGSTOP) for ten
seconds, its connections open and silent, then continued. Health must say NOT_SERVING during it, and
afterwards nothing acknowledged is lost and the same processes serve.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobs.v1 import jobs_pb2
from shared.storage.migrator import migrate
from tests.acknowledged_load import OPEN_JOBS, Ledger, audit, client_loop, count, create_service_logins
from tests.private_postgres import PrivatePostgres
from tests.process_fixtures import ServiceStack, free_port, wait_until
from tests.process_tree import signal_every_process

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

RUN_SECONDS = 120.0
CLIENTS = 4
CLIENT_PAUSE_SECONDS = 0.03
DOWN_SECONDS = 4.0
# (seconds into the run, what happens)
CHAOS_PLAN = [(15, "terminate"), (28, "crash"), (48, "terminate"), (62, "crash"), (82, "terminate"), (96, "crash")]
SETTLE_SECONDS = 150
STALL_SECONDS = 10.0
ACKS_BEFORE_STALL = 150
ACKS_AFTER_STALL = 150


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres(free_port())
    try:
        server.start()
        yield server
    finally:
        print(f"\n----- private PostgreSQL log (tail) -----\n{server.log_tail(1500)}")
        server.destroy()


def _prepare(server: PrivatePostgres) -> tuple[str, str, str]:
    """A migrated database and the API's and workers' least-privileged logins; returns the three URLs."""
    with psycopg.connect(server.admin_url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE jobs")
    owner_url = server.admin_url("jobs")
    migrate(owner_url)
    create_service_logins(owner_url)
    base = f"127.0.0.1:{server.port}/jobs?connect_timeout=2"
    return owner_url, f"postgresql://api_login@{base}", f"postgresql://worker_login@{base}"


def _chaos(server: PrivatePostgres, stack: ServiceStack, started: float, record: dict[str, list]) -> None:
    for at, action in CHAOS_PLAN:
        time.sleep(max(0.0, started + at - time.monotonic()))
        if action == "terminate":
            record["terminated"].append(server.terminate_every_session())
            continue
        server.stop("immediate")
        down_until = time.monotonic() + DOWN_SECONDS
        seen = set()
        while time.monotonic() < down_until:
            seen.add(stack.health())
            time.sleep(0.1)  # polling the probe, as a kubelet would
        record["health_while_down"].append(seen)
        server.start()


def test_postgres_crashes_and_killed_sessions_lose_no_acknowledged_job(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    owner_url, api_url, worker_url = _prepare(private_postgres)
    stack = ServiceStack(owner_url, tmp_path)
    try:
        api = stack.start_api(DATABASE_URL=api_url, JOBS_DB_ACQUIRE_TIMEOUT_SECONDS="1")
        workers = [
            stack.start_worker(name, DATABASE_URL=worker_url, JOBS_WORKER_CONCURRENCY="8") for name in ("w1", "w2")
        ]
        ledger = Ledger()
        record: dict[str, list] = {"terminated": [], "health_while_down": []}
        started = time.monotonic()
        stop_at = started + RUN_SECONDS
        threads = [
            threading.Thread(
                target=client_loop,
                args=(stack, i, lambda: time.monotonic() < stop_at, ledger, CLIENT_PAUSE_SECONDS),
                daemon=True,
            )
            for i in range(CLIENTS)
        ]
        threads.append(threading.Thread(target=_chaos, args=(private_postgres, stack, started, record), daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(RUN_SECONDS + 120)
            assert not thread.is_alive(), thread.name
        run_seconds = time.monotonic() - started

        wait_until(
            lambda: count(owner_url, OPEN_JOBS) == 0,
            timeout=SETTLE_SECONDS,
            interval=1.0,
            what="every job to reach a terminal state",
        )
        found = audit(owner_url, ledger)

        print(
            f"\nrestart run: {run_seconds:.0f}s, {len(record['health_while_down'])} crashes, sessions killed "
            f"{record['terminated']}; acknowledged {len(ledger.acknowledged)}, client retries {ledger.retries}, "
            f"lost {len(found.lost)}, not succeeded {len(found.not_succeeded)}, "
            f"results published twice {found.published_twice}, rows {len(found.rows)}, results {found.results}, "
            f"health while down {record['health_while_down']}"
        )
        assert ledger.unexpected == []
        assert len(ledger.acknowledged) > 1000
        assert found.lost == []
        assert found.not_succeeded == []
        assert found.published_twice == 0 and found.results == found.succeeded
        assert len(record["health_while_down"]) == 3 and all(record["terminated"])
        assert all("NOT_SERVING" in seen for seen in record["health_while_down"])

        # The same processes serve again: nobody restarted them.
        for process in [api, *workers]:
            assert process.popen.poll() is None, f"{process.name} exited"
        wait_until(lambda: stack.health() == "SERVING", timeout=20, what="SERVING again")
        after = stack.tenant("acme").submit("echo", b"after the storm", idempotency_key="after").job.job_id
        wait_until(
            lambda: stack.tenant("acme").get(after).state == jobs_pb2.JOB_STATE_SUCCEEDED,
            timeout=30,
            what="a job submitted afterwards to run",
        )
    finally:
        stack.close()


def test_a_database_that_stalls_is_reported_not_serving_and_loses_nothing(
    private_postgres: PrivatePostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_url, api_url, worker_url = _prepare(private_postgres)
    stack = ServiceStack(owner_url, tmp_path)
    keep_going = threading.Event()
    keep_going.set()
    try:
        api = stack.start_api(DATABASE_URL=api_url, JOBS_DB_ACQUIRE_TIMEOUT_SECONDS="1")
        workers = [
            stack.start_worker(name, DATABASE_URL=worker_url, JOBS_WORKER_CONCURRENCY="8") for name in ("w1", "w2")
        ]
        ledger = Ledger()
        threads = [
            threading.Thread(
                target=client_loop, args=(stack, i, keep_going.is_set, ledger, CLIENT_PAUSE_SECONDS), daemon=True
            )
            for i in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: ledger.count() >= ACKS_BEFORE_STALL, timeout=120, interval=0.1, what="acknowledgments")

        stalled_at = time.monotonic()
        server = signal_every_process(private_postgres.postmaster_pid(), signal.SIGSTOP)
        health: list[tuple[float, str]] = []
        try:
            while time.monotonic() < stalled_at + STALL_SECONDS:
                health.append((time.monotonic(), stack.health()))
                time.sleep(0.1)  # polling the probe, as a kubelet would
        finally:
            for pid in server:
                os.kill(pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        wait_until(
            lambda: ledger.count(since=resumed_at) >= ACKS_AFTER_STALL,
            timeout=120,
            interval=0.1,
            what="acknowledgments after the stall",
        )
        keep_going.clear()
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive(), thread.name
        wait_until(lambda: count(owner_url, OPEN_JOBS) == 0, timeout=SETTLE_SECONDS, interval=1.0, what="the end")
        found = audit(owner_url, ledger)

        not_serving = next((at - stalled_at for at, status in health if status == "NOT_SERVING"), None)
        first_after = ledger.first_acknowledged(resumed_at)
        waits = ledger.indeterminate_waits(stalled_at, first_after or float("inf"))
        with capsys.disabled():
            print(
                f"\nstall of {STALL_SECONDS:.0f}s: health NOT_SERVING "
                f"{'never' if not_serving is None else f'{not_serving:.1f}s'} after it began; indeterminate "
                f"answers during it {ledger.indeterminate_codes(stalled_at, first_after or float('inf'))}, each after "
                f"{f'{waits[len(waits) // 2]:.1f}s (median), {waits[-1]:.1f}s at most' if waits else '-'}; first "
                f"acknowledgment {'never' if first_after is None else f'{first_after - resumed_at:.1f}s'} after "
                f"it ended; acknowledged {len(ledger.acknowledged)}, lost {len(found.lost)}, "
                f"not succeeded {len(found.not_succeeded)}, results published twice {found.published_twice}"
            )
        assert ledger.unexpected == []
        assert found.lost == []
        assert found.not_succeeded == []
        assert found.published_twice == 0 and found.results == found.succeeded
        assert not_serving is not None, f"health during the stall: {sorted({status for _, status in health})}"
        for process in [api, *workers]:
            assert process.popen.poll() is None, f"{process.name} exited"
    finally:
        keep_going.clear()
        stack.close()
