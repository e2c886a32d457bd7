"""A chaos run from start to verdict: the cluster up and recording, the limits set, the workload and the
faults for the run's length, every fault healed, the wait for the jobs to settle, the database's final
state written into the history, and the checker's report on the whole history.

`ChaosSession` is the same machinery without the random parts, for a test that scripts one interleaving
(tests/stack/test_chaos.py breaks a guarantee on purpose and shows that the checker names it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import psycopg
from psycopg.rows import dict_row

from chaos.calls import CHANNEL_OPTIONS, Caller
from chaos.checker import Report, check_history
from chaos.cluster import ADMIN_TOKEN, Cluster, tenant_token
from chaos.config import STATEMENT_FAULT_KINDS, ChaosConfig
from chaos.history import History, HistoryWriter, read_history
from chaos.nemesis import Nemesis
from chaos.operator import Operator
from chaos.workload import Client, TenantBook
from jobs.v1 import admin_pb2_grpc, jobs_pb2_grpc
from shared.storage.sql_loader import load_sql_blocks

log = logging.getLogger("chaos")
_SQL = load_sql_blocks("chaos.sql", package="chaos")
# The final state, table by table: (history event, statement).
SNAPSHOT = (
    ("db.job", "snapshot_jobs"),
    ("db.event", "snapshot_events"),
    ("db.result", "snapshot_results"),
    ("db.receipt", "snapshot_receipts"),
    ("db.checkpoint", "snapshot_checkpoints"),
    ("db.attempt_error", "snapshot_attempt_errors"),
)
# How long the clients get, after the faults end, to hear a definite answer to what they sent.
CLIENTS_FINISH_SECONDS = 60.0
SETTLE_POLL_SECONDS = 1.0
SUPERVISE_SECONDS = 0.5


class ChaosSession:
    """The cluster up and every client recording into one history."""

    def __init__(self, config: ChaosConfig) -> None:
        config.workdir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.history_path = config.workdir / "history.jsonl"
        self.history = HistoryWriter(self.history_path, "runner")
        self.cluster = Cluster(config, self.history_path)
        self._channels: list[grpc.aio.Channel] = []
        self._books = {tenant: TenantBook() for tenant in config.tenants}
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        log.info("chaos run in %s: %.0fs, seed %d", self.config.workdir, self.config.seconds, self.config.seed)
        starting = asyncio.ensure_future(asyncio.to_thread(self.cluster.start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Interrupted while processes start: let them all start, so that closing stops every one.
            with contextlib.suppress(Exception):
                await starting
            raise
        self.history.record("run.start", **_described(self.config))
        self._channels = [
            grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) for port in self.cluster.api_ports
        ]
        self.operator = Operator(
            Caller("operator", ADMIN_TOKEN, "", self.history.for_source("operator"), self._rng("operator")),
            [admin_pb2_grpc.AdminServiceStub(channel) for channel in self._channels],
        )
        self._supervisor = asyncio.create_task(self._supervise())

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"{self.config.seed}-{name}")

    def client(self, tenant: str, number: int = 1) -> Client:
        name = f"{tenant}.{number}"
        return Client(
            Caller(name, tenant_token(tenant), tenant, self.history.for_source(f"client:{name}"), self._rng(name)),
            [jobs_pb2_grpc.JobServiceStub(channel) for channel in self._channels],
            self._books,
        )

    def read(self) -> History:
        return read_history(self.history_path)

    async def _supervise(self) -> None:
        """Starts again, as a supervisor would, a replica that exited on its own (faults never leave one
        down: they start what they kill at once), and records that it did: surviving faults is the point."""
        while True:
            await asyncio.sleep(SUPERVISE_SECONDS)
            for process in [*self.cluster.apis, *self.cluster.workers]:
                if process.popen is not None and not process.running():
                    self.history.record(
                        "process.exited", target=process.name, code=process.popen.returncode, log=str(process.log_path)
                    )
                    process.start()

    async def under_faults(self) -> None:
        """The workload and the faults for the run's length; then every fault healed and the clients stopped."""
        stop_work, stop_faults = asyncio.Event(), asyncio.Event()
        nemesis = Nemesis(self.cluster, self.config, self.history.for_source("nemesis"))
        faults = asyncio.create_task(nemesis.run(stop_faults))
        clients = [
            self.client(tenant, number)
            for tenant in self.config.tenants
            for number in range(1, self.config.clients_per_tenant + 1)
        ]
        work = [asyncio.create_task(client.run(stop_work)) for client in clients]
        work.append(asyncio.create_task(self.operator.pause_and_resume(stop_work)))
        try:
            await asyncio.wait([faults], timeout=self.config.seconds)
            if faults.done():
                faults.result()  # a fault that could not be made or undone ends the run with its error
            stop_faults.set()
            await faults
            await asyncio.to_thread(self.cluster.heal)
            self.history.record("run.healed", faults=dict(nemesis.counts))
            stop_work.set()
            done, unfinished = await asyncio.wait(work, timeout=CLIENTS_FINISH_SECONDS)
            for task in done:
                task.result()
            self.history.record("run.clients_stopped", unfinished=len(unfinished))
        finally:
            stop_faults.set()
            stop_work.set()
            for task in [faults, *work]:
                task.cancel()
            await asyncio.gather(faults, *work, return_exceptions=True)

    async def finish(self) -> Report:
        """Waits for the jobs to settle, writes the final state into the history, stops everything, checks."""
        await asyncio.to_thread(self.cluster.heal)
        await self._settle()
        await asyncio.to_thread(_snapshot, self.cluster.owner_url, self.history)
        await self.close()
        self.history.record("faults.statement", counts=_statement_faults(self.config.workdir / "logs"))
        self.history.record("run.end")
        return check_history(self.read())

    async def _settle(self) -> None:
        """Waits until nothing moves on its own any more: every job ended or waits for a person."""
        deadline = time.monotonic() + self.config.settle_seconds
        unsettled = -1
        while time.monotonic() < deadline:
            unsettled = await asyncio.to_thread(_count_unsettled, self.cluster.owner_url)
            if unsettled == 0:
                break
            await asyncio.sleep(SETTLE_POLL_SECONDS)
        self.history.record("run.settled", settled=unsettled == 0, unsettled=unsettled)

    async def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        for channel in self._channels:
            await channel.close()
        self._channels = []
        await asyncio.to_thread(self.cluster.stop)


@asynccontextmanager
async def chaos_session(config: ChaosConfig) -> AsyncIterator[ChaosSession]:
    session = ChaosSession(config)
    try:
        await session.start()
        yield session
    finally:
        await session.close()
        session.history.close()


async def run_chaos(config: ChaosConfig) -> Report:
    async with chaos_session(config) as session:
        await session.operator.set_limits(config.limits)
        await session.under_faults()
        return await session.finish()


def _described(config: ChaosConfig) -> dict[str, Any]:
    return {
        "seed": config.seed,
        "seconds": config.seconds,
        "lease_seconds": config.lease_seconds,
        "heartbeat_seconds": config.heartbeat_seconds,
        "cancel_slack_seconds": config.cancel_slack_seconds,
        "fault_interval_seconds": config.fault_interval_seconds,
        "statement_faults": config.statement_faults,
        "faults": sorted(kind.value for kind in config.faults),
        "tenants": list(config.tenants),
        "limits": dict(config.limits),
        "api_argv": list(config.api_argv),
        "worker_argv": list(config.worker_argv),
    }


def _count_unsettled(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute(_SQL["jobs_unsettled_count"]).fetchone()
    except psycopg.OperationalError:
        return -1
    return int(row[0]) if row else -1


def _snapshot(url: str, history: HistoryWriter) -> None:
    """The database as the run left it, in one snapshot, into the history as db.* records."""
    database = history.for_source("database")
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot for every table
        for event, statement in SNAPSHOT:
            for row in conn.execute(_SQL[statement]):
                database.record(event, **row)


def _statement_faults(logs: Path) -> dict[str, int]:
    """JOBS_FAULT_INJECTION's faults, counted from every service process's log (each of its lives)."""
    counts: Counter[str] = Counter({kind: 0 for kind in STATEMENT_FAULT_KINDS})
    for path in sorted(logs.glob("*.log")):
        with path.open(errors="replace") as lines:
            for line in lines:
                if "injected fault: " not in line:
                    continue
                with contextlib.suppress(ValueError):
                    reason = json.loads(line).get("reason")
                    if reason in counts:
                        counts[reason] += 1
    return dict(counts)
