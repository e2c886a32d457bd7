"""One chaos run from start to verdict: the cluster up, the limits set, the workload and the faults for
the run's length, every fault healed, the wait for the jobs to settle, the database's final state
written into the history, and the checker's report on the whole history."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import psycopg
from psycopg.rows import dict_row

from chaos.calls import CHANNEL_OPTIONS, Caller
from chaos.checker import Report, check_history
from chaos.cluster import ADMIN_TOKEN, Cluster, tenant_token
from chaos.config import STATEMENT_FAULT_KINDS, ChaosConfig
from chaos.history import HistoryWriter, read_history
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


async def run_chaos(config: ChaosConfig) -> Report:
    config.workdir.mkdir(parents=True, exist_ok=True)
    history_path = config.workdir / "history.jsonl"
    history = HistoryWriter(history_path, "runner")
    cluster = Cluster(config, history_path)
    try:
        log.info("chaos run in %s: %.0fs, seed %d", config.workdir, config.seconds, config.seed)
        await asyncio.to_thread(cluster.start)
        history.record("run.start", **_described(config))
        await _run_and_settle(config, cluster, history)
        await asyncio.to_thread(_snapshot, cluster.owner_url, history)
        history.record("faults.statement", counts=_statement_faults(config.workdir / "logs"))
        history.record("run.end")
    finally:
        await asyncio.to_thread(cluster.stop)
        history.close()
    return check_history(read_history(history_path))


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


async def _run_and_settle(config: ChaosConfig, cluster: Cluster, history: HistoryWriter) -> None:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) for port in cluster.api_ports]
    try:
        operator = Operator(
            Caller("operator", ADMIN_TOKEN, "", history.for_source("operator"), random.Random(f"{config.seed}-op")),
            [admin_pb2_grpc.AdminServiceStub(channel) for channel in channels],
        )
        await operator.set_limits(config.limits)
        job_stubs = [jobs_pb2_grpc.JobServiceStub(channel) for channel in channels]
        books = {tenant: TenantBook() for tenant in config.tenants}
        clients = [
            Client(
                Caller(
                    f"{tenant}.{number}",
                    tenant_token(tenant),
                    tenant,
                    history.for_source(f"client:{tenant}.{number}"),
                    random.Random(f"{config.seed}-{tenant}-{number}"),
                ),
                job_stubs,
                books,
            )
            for tenant in config.tenants
            for number in range(1, config.clients_per_tenant + 1)
        ]
        await _under_faults(config, cluster, history, operator, clients)
        await _settle(config, cluster, history)
    finally:
        for channel in channels:
            await channel.close()


async def _under_faults(
    config: ChaosConfig, cluster: Cluster, history: HistoryWriter, operator: Operator, clients: list[Client]
) -> None:
    stop_work, stop_faults = asyncio.Event(), asyncio.Event()
    nemesis = Nemesis(cluster, config, history.for_source("nemesis"))
    faults = asyncio.create_task(nemesis.run(stop_faults))
    work = [asyncio.create_task(client.run(stop_work)) for client in clients]
    work.append(asyncio.create_task(operator.pause_and_resume(stop_work)))
    try:
        await asyncio.wait([faults], timeout=config.seconds)
        if faults.done():
            faults.result()  # a fault that could not be made or undone ends the run with its error
        stop_faults.set()
        await faults
        await asyncio.to_thread(cluster.heal)
        history.record("run.healed", faults=dict(nemesis.counts))
        stop_work.set()
        done, unfinished = await asyncio.wait(work, timeout=CLIENTS_FINISH_SECONDS)
        for task in done:
            task.result()
        history.record("run.clients_stopped", unfinished=len(unfinished))
    finally:
        stop_faults.set()
        stop_work.set()
        for task in [faults, *work]:
            task.cancel()
        await asyncio.gather(faults, *work, return_exceptions=True)


async def _settle(config: ChaosConfig, cluster: Cluster, history: HistoryWriter) -> None:
    """Waits until nothing moves on its own any more: every job ended or waits for a person."""
    deadline = time.monotonic() + config.settle_seconds
    unsettled = -1
    while time.monotonic() < deadline:
        unsettled = await asyncio.to_thread(_count_unsettled, cluster.owner_url)
        if unsettled == 0:
            break
        await asyncio.sleep(SETTLE_POLL_SECONDS)
    history.record("run.settled", settled=unsettled == 0, unsettled=unsettled)


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
