"""The claim's cost with sequences: BENCH_SEQUENCES sequences of BENCH_SEQUENCE_LENGTH pending jobs (10,000
of 10) against the same jobs without sequences, each side in a database of its own. A sequence's jobs
behind its head are parked out of the claim's walk, so the claim should cost the same; the completion
releases each sequence's next job, which the cycle's figure counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks.fairness import CLAIM_BATCH, completion_params, env_int
from benchmarks.harness import median, percentile
from shared.storage import queries
from shared.storage.sql_loader import load_sql_blocks

_SQL = load_sql_blocks("sequences.sql", package="benchmarks")
SIDES = ("plain", "sequenced")
ROUNDS = 60


def claim_cost_with_sequences(urls: dict[str, str]) -> dict[str, float]:
    """Per side (`urls` by side: plain, sequenced): single claims of 50, and claim-then-complete cycles of
    50, each rolled back so that every one sees the same queue; the sides interleaved so that a busy moment
    of the machine falls on both."""
    sequences, length = env_int("BENCH_SEQUENCES", 10_000), env_int("BENCH_SEQUENCE_LENGTH", 10)
    params = {"worker_id": "bench", "kinds": ["echo"], "limit": CLAIM_BATCH, "lease_seconds": 600}
    conns: dict[str, psycopg.Connection[dict[str, Any]]] = {}
    try:
        for side in SIDES:
            conn = psycopg.connect(urls[side], autocommit=True, row_factory=dict_row)
            conns[side] = conn
            conn.execute(_SQL[f"{side}_insert"], {"sequences": sequences, "length": length})
            conn.execute("VACUUM ANALYZE jobs")
            conn.autocommit = False
        # The claims first, then the cycles: a cycle's completion releases the next jobs, whose index
        # entries its rollback leaves dead in the walk, which no real (committed) release leaves.
        claims = _timed(conns, lambda conn: _claim(conn, params))
        cycles = _timed(conns, lambda conn: _claim_and_complete(conn, params))
    finally:
        for conn in conns.values():
            conn.close()
    out: dict[str, float] = {"sequences": sequences, "length": length, "claims": ROUNDS}
    for side in SIDES:
        out[f"{side}_claim_p50_ms"] = median(claims[side]) * 1000
        out[f"{side}_claim_p99_ms"] = percentile(claims[side], 99) * 1000
        out[f"{side}_cycle_p50_ms"] = median(cycles[side]) * 1000
    out["ratio"] = out["sequenced_claim_p50_ms"] / out["plain_claim_p50_ms"]
    out["cycle_ratio"] = out["sequenced_cycle_p50_ms"] / out["plain_cycle_p50_ms"]
    return out


def _timed(
    conns: dict[str, psycopg.Connection[dict[str, Any]]], step: Callable[[psycopg.Connection[dict[str, Any]]], object]
) -> dict[str, list[float]]:
    """ROUNDS of `step` per side, rolled back, the sides interleaved so that a busy moment falls on both."""
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for n in range(ROUNDS):
        for side in SIDES[:: 1 if n % 2 == 0 else -1]:
            began = time.perf_counter()
            step(conns[side])
            times[side].append(time.perf_counter() - began)
            conns[side].rollback()
    return times


def _claim(conn: psycopg.Connection[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    claimed = conn.execute(queries.JOB_CLAIM_BATCH, params).fetchall()
    assert len(claimed) == CLAIM_BATCH, f"claimed {len(claimed)}"
    return claimed


def _claim_and_complete(conn: psycopg.Connection[dict[str, Any]], params: dict[str, Any]) -> None:
    conn.execute(queries.JOB_COMPLETE_BATCH, completion_params(_claim(conn, params), "bench"))
