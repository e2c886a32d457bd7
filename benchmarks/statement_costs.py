"""What each part of the schema costs the three statements every job goes through: the insert of a batch of
plain submissions, the claim and the fenced completion, by the CPU time of the server process that runs
them (its scheduler's count, in nanoseconds), per job. Each part is taken away from a side's database (a
trigger disabled, an index dropped: benchmarks/sql/statement_costs.sql) and the side is measured against
a side as shipped, both fresh, in turns (each round starting with the side the last ended with), on one
connection each, so that a busy moment of the machine falls on both. BENCH_STATEMENT_BATCH jobs a
statement (100, the batch a replica claims and completes at 100 slots) and BENCH_STATEMENT_ROUNDS rounds
(200) per comparison."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks.fairness import completion_params, env_int
from benchmarks.harness import TENANTS, median, plain_insert_params
from shared.storage import queries
from shared.storage.sql_loader import load_sql_blocks

_SQL = load_sql_blocks("statement_costs.sql", package="benchmarks")
PARTS = (
    "without_history",
    "without_settling",
    "without_every_trigger",
    "without_tenant_created_index",
    "without_tenant_queued_index",
)
PHASES = ("insert", "claim", "complete")
# The first rounds of each side make the session's plans; they are left out.
WARM_ROUNDS = 5


def statement_costs(databases: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Per part, a fresh pair of databases (`databases[part]`: as shipped, and the one the part is taken
    from; the same jobs go through both): the median µs per job of each phase on either side and their
    ratio (below 1, what the part costs)."""
    batch, rounds = env_int("BENCH_STATEMENT_BATCH", 100), env_int("BENCH_STATEMENT_ROUNDS", 200)
    out: dict[str, float] = {"batch": batch, "rounds": rounds}
    for part in PARTS:
        shipped_url, taken_url = databases[part]
        with (
            psycopg.connect(shipped_url, autocommit=True, row_factory=dict_row) as shipped,
            psycopg.connect(taken_url, autocommit=True, row_factory=dict_row) as taken,
        ):
            taken.execute(_SQL[part])
            costs = _interleaved({"shipped": shipped, "taken": taken}, batch, rounds)
        for phase in (*PHASES, "total"):
            out[f"{part}_{phase}_shipped_us"] = median(costs["shipped"][phase])
            out[f"{part}_{phase}_taken_us"] = median(costs["taken"][phase])
            out[f"{part}_{phase}_ratio"] = out[f"{part}_{phase}_taken_us"] / out[f"{part}_{phase}_shipped_us"]
    return out


def _interleaved(
    conns: dict[str, psycopg.Connection[dict[str, Any]]], batch: int, rounds: int
) -> dict[str, dict[str, list[float]]]:
    costs: dict[str, dict[str, list[float]]] = {side: {phase: [] for phase in (*PHASES, "total")} for side in conns}
    pids = {side: conn.execute(_SQL["backend_pid"]).fetchone()["pid"] for side, conn in conns.items()}
    sides = list(conns.items())
    for round_number in range(rounds + WARM_ROUNDS):
        # Each round starts with the side the one before ended with.
        for side, conn in sides if round_number % 2 == 0 else sides[::-1]:
            spent = _cycle(conn, pids[side], batch)
            if round_number >= WARM_ROUNDS:
                for phase, microseconds in zip(PHASES, spent, strict=True):
                    costs[side][phase].append(microseconds)
                costs[side]["total"].append(sum(spent))
    return costs


def _cycle(conn: psycopg.Connection[dict[str, Any]], pid: int, batch: int) -> list[float]:
    """One batch inserted, claimed and completed: each statement's server CPU, in µs per job."""
    marks = [_cpu_ns(pid)]
    conn.execute(queries.JOB_INSERT_MANY_IDS, plain_insert_params(TENANTS[0], batch))
    marks.append(_cpu_ns(pid))
    claimed = conn.execute(
        queries.JOB_CLAIM_BATCH, {"worker_id": "bench", "kinds": ["echo"], "limit": batch, "lease_seconds": 600}
    ).fetchall()
    marks.append(_cpu_ns(pid))
    if len(claimed) != batch:
        raise RuntimeError(f"claimed {len(claimed)} of {batch}")
    conn.execute(queries.JOB_COMPLETE_BATCH, completion_params(claimed, "bench"))
    marks.append(_cpu_ns(pid))
    return [(after - before) / batch / 1000 for before, after in itertools.pairwise(marks)]


def _cpu_ns(pid: int) -> int:
    """The CPU time a local server process has run, in nanoseconds (/proc/<pid>/schedstat's first field)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
