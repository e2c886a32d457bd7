"""Other tenants' waits beside one tenant's backlog, on the real claim and completion statements (the
worker-shaped claimers of benchmarks/fairness.py), with no gRPC and no handler.

Two figures, each measured side by side in one run: the sides' databases are loaded first, then B's
submissions go to them in turns (BENCH_BACKLOG_ROUNDS rounds, 4, each side once a round, the order turned
every round), so that a busy moment of the shared machine falls on every side alike.

- `waiting_backlogs` (the promise that one tenant's backlog never makes others wait): tenant A queues
  BENCH_WAITING_JOBS (100,000) jobs that cannot start (behind its own key `doc@1` with one of them running,
  of a paused kind, behind a key a pushback holds) and B's waits are compared with B's on an idle database.
- `fair_wait` (fairness itself): A's backlog of runnable jobs is kept at 10,000, 100,000 and 1,000,000
  (BENCH_FAIR_BACKLOGS) while the claimers work it down, and B's waits are counted in claims: how many
  claims began after B's job was submitted up to the one that took it.

B submits BENCH_FAIR_B_JOBS (1,000) jobs to each side, one every 2 ms; every job runs 5 ms.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.fairness import WARM_UP_SECONDS, SlotDrain, env_int, insert_plain, trickle_waits
from benchmarks.harness import median, percentile
from shared.domain.limit_keys import own_key
from shared.storage import queries
from shared.storage.sql_loader import load_sql_blocks

_SQL = load_sql_blocks("fairness.sql", package="benchmarks")

A, B = "bench-a", "bench-b"
RUN_SECONDS = 0.005
SUBMIT_EVERY_SECONDS = 0.002
# Every side's claimers ask for both kinds: the paused one's queue is A's on its side, empty elsewhere.
KINDS = ("echo", "sleep")
PAUSED_KIND = "sleep"
# How long the loaded sides' claimers may take to park A's backlog before B's turns begin.
SETTLE_TIMEOUT_SECONDS = 600.0
# How often A's backlog is topped up while the claimers work it down.
TOP_UP_EVERY_SECONDS = 0.02


@dataclass
class Side:
    """One database of a side-by-side figure: A's backlog kept at `keep_queued` jobs when set, and what
    B's turns there measured."""

    url: str
    keep_queued: int = 0
    acked: list[float] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    claims_waited: list[int] = field(default_factory=list)
    claim_seconds: list[float] = field(default_factory=list)
    counted: int = 0

    def figures(self, prefix: str) -> dict[str, float]:
        return {
            f"{prefix}_p50_ms": median(self.acked) * 1000,
            f"{prefix}_p99_ms": percentile(self.acked, 99) * 1000,
            f"{prefix}_p99_ms_from_created": percentile(self.created, 99) * 1000,
            f"{prefix}_p99_claims": float(percentile([float(n) for n in self.claims_waited], 99)),
            f"{prefix}_max_claims": float(max(self.claims_waited)),
            f"{prefix}_claim_p50_ms": median(self.claim_seconds) * 1000,
            f"{prefix}_counted": float(self.counted),
        }


async def _keep_queued(conn: psycopg.AsyncConnection[Any], drain: SlotDrain) -> None:
    """Submits as many jobs of A as the claimers took, until they stop: A's backlog stays where it was."""
    submitted = 0
    while not drain.stop:
        taken = drain.claimed_of[A] - submitted
        if taken > 0:
            await insert_plain(conn, A, taken)
            submitted += taken
        await asyncio.sleep(TOP_UP_EVERY_SECONDS)


async def _turn(side: Side, b_jobs: int) -> None:
    """B's `b_jobs` submissions to one side while its claimers work, and what they waited."""
    drain = SlotDrain(side.url, kinds=KINDS, run_seconds=RUN_SECONDS)
    async with await psycopg.AsyncConnection.connect(side.url, autocommit=True) as top_up:
        workers = asyncio.create_task(drain.run())
        topping = asyncio.create_task(_keep_queued(top_up, drain)) if side.keep_queued else None
        await asyncio.sleep(WARM_UP_SECONDS)
        drain.measure_from_now()
        waits = await trickle_waits(side.url, B, b_jobs, SUBMIT_EVERY_SECONDS)
        drain.stop = True
        await workers
        if topping:
            await topping
    side.acked += waits["acked"]
    side.created += waits["created"]
    side.claims_waited += drain.claims_waited(waits["acked_at"])
    side.claim_seconds += drain.claim_seconds
    side.counted += waits["counted"]


def rounds() -> int:
    return env_int("BENCH_BACKLOG_ROUNDS", 4)


async def _side_by_side(sides: dict[str, Side]) -> None:
    """B's jobs to every side, in rounds() turns each, the order turned every round."""
    b_jobs = env_int("BENCH_FAIR_B_JOBS", 1000)
    labels = list(sides)
    for number in range(rounds()):
        shift = number % len(labels)
        for label in labels[shift:] + labels[:shift]:
            await _turn(sides[label], b_jobs // rounds())


async def _settle(url: str) -> dict[str, float]:
    """Claimers, with nothing of B's queued, until every one of A's jobs that cannot start is parked: the
    claims meet a bulk-inserted backlog a batch at a time (a submission's jobs would meet them as they come).
    Returns how long that took and in how many claims."""
    drain = SlotDrain(url, kinds=KINDS, run_seconds=RUN_SECONDS)
    workers = asyncio.create_task(drain.run())
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while time.monotonic() - started < SETTLE_TIMEOUT_SECONDS:
            cur = await conn.execute(_SQL["tenant_walked_count"], {"tenant": A})
            if (await cur.fetchone() or (0,))[0] == 0:
                break
            await asyncio.sleep(0.2)
    drain.stop = True
    await workers
    return {"settle_seconds": time.monotonic() - started, "settle_claims": float(len(drain.claim_spans))}


async def _backlog(
    conn: psycopg.AsyncConnection[Any], count: int, *, kind: str = "echo", keys: tuple[str, ...] = (), bound: int = 0
) -> None:
    """`count` of A's jobs in one statement, as as many submissions carrying `keys`, each `@bound`, store them."""
    params = {"tenant": A, "kind": kind, "keys": list(keys), "bounds": [bound] * len(keys), "count": count}
    await conn.execute(_SQL["backlog_insert"], params)


async def _throttled(conn: psycopg.AsyncConnection[Any], jobs: int) -> bool:
    """A's jobs behind its own key `doc@1` (one at a time), the first of them running for the whole run."""
    doc = (own_key(A, "doc"),)
    await _backlog(conn, 1, keys=doc, bound=1)
    cur = await conn.execute(
        queries.JOB_CLAIM_BATCH, {"worker_id": "bench-a-doc", "kinds": ["echo"], "limit": 1, "lease_seconds": 3600}
    )
    assert len(await cur.fetchall()) == 1
    await _backlog(conn, jobs, keys=doc, bound=1)
    return True


async def _paused(conn: psycopg.AsyncConnection[Any], jobs: int) -> bool:
    """A's jobs of a kind an operator paused."""
    await conn.execute(queries.KIND_PAUSE, {"kind": PAUSED_KIND, "actor": "bench", "reason": "bench"})
    await _backlog(conn, jobs, kind=PAUSED_KIND)
    return False


async def _held(conn: psycopg.AsyncConnection[Any], jobs: int) -> bool:
    """A's jobs behind its own key `doc`, held by a provider's pushback for the whole run."""
    doc = own_key(A, "doc")
    await conn.execute(queries.KEY_HOLD, {"key": doc, "until": datetime.now(UTC) + timedelta(hours=1)})
    await _backlog(conn, jobs, keys=(doc,))
    return True


WAITING: dict[str, Callable[[psycopg.AsyncConnection[Any], int], Awaitable[bool]]] = {
    "throttled": _throttled,
    "paused": _paused,
    "held": _held,
}


async def waits_beside_waiting_backlogs(urls: dict[str, str]) -> dict[str, float]:
    """B's waits on an idle database (`urls["idle"]`) and beside A's BENCH_WAITING_JOBS jobs that cannot
    start, one database per reason (`urls` by the names of WAITING), side by side. The loaded sides are
    settled first (`<side>_settle_seconds`): their claims park A's jobs a batch at a time; then vacuumed."""
    jobs = env_int("BENCH_WAITING_JOBS", 100_000)
    out: dict[str, float] = {"waiting_jobs": jobs}
    for label, load in WAITING.items():
        async with await psycopg.AsyncConnection.connect(urls[label], autocommit=True) as conn:
            parks = await load(conn, jobs)
            await conn.execute("VACUUM ANALYZE jobs")
        if parks:
            out.update({f"{label}_{k}": v for k, v in (await _settle(urls[label])).items()})
            # Parking left a dead entry in the claim's index for every job parked, until a vacuum: the one
            # autovacuum runs once 2% of `jobs` changed (0001_jobs.sql); this server's autovacuum is off.
            async with await psycopg.AsyncConnection.connect(urls[label], autocommit=True) as conn:
                await conn.execute("VACUUM jobs")
    sides = {label: Side(url) for label, url in urls.items()}
    await _side_by_side(sides)
    for label, side in sides.items():
        out.update(side.figures(label))
    for label in WAITING:
        out[f"{label}_p50_ratio"] = out[f"{label}_p50_ms"] / max(out["idle_p50_ms"], 1e-6)
        out[f"{label}_p99_ratio"] = out[f"{label}_p99_ms"] / max(out["idle_p99_ms"], 1e-6)
    return out


def backlog_sizes() -> list[int]:
    """A's backlogs of the fairness figure, smallest first (BENCH_FAIR_BACKLOGS, comma-separated)."""
    sizes = os.environ.get("BENCH_FAIR_BACKLOGS", "10000,100000,1000000")
    return sorted(int(n) for n in sizes.split(",") if n)


async def _bulk_backlog(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    """`count` of A's runnable jobs, with `jobs`' indexes built after the rows are in (as a restore builds
    them) rather than grown row by row: a million rows grown into thirteen indexes took over ten minutes on
    the shared machine, where built they take about one. The triggers run as for any insert."""
    indexes = await (await conn.execute(_SQL["jobs_secondary_indexes"])).fetchall()
    for name, _ in indexes:
        await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
    await _backlog(conn, count)
    for _, definition in indexes:
        await conn.execute(definition)
    await conn.execute("VACUUM ANALYZE jobs")


async def waits_by_backlog(urls: dict[str, str]) -> dict[str, float]:
    """B's waits with A's runnable backlog kept at each size (`urls["a<size>"]`), and alone (`urls["solo"]`),
    side by side: in milliseconds, and in claims (the claims that began after B's job was submitted, up to
    the one that took it). Whether B waits behind A's backlog shows in the claims, and in whether the
    milliseconds grow with its size."""
    sizes = backlog_sizes()
    out: dict[str, float] = {}
    for size in sizes:
        async with await psycopg.AsyncConnection.connect(urls[f"a{size}"], autocommit=True) as conn:
            started = time.monotonic()
            await _bulk_backlog(conn, size)
            out[f"a{size}_load_seconds"] = time.monotonic() - started
    sides = {"solo": Side(urls["solo"])} | {f"a{size}": Side(urls[f"a{size}"], keep_queued=size) for size in sizes}
    await _side_by_side(sides)
    for label, side in sides.items():
        out.update(side.figures(label))
    smallest, largest = f"a{min(sizes)}", f"a{max(sizes)}"
    out["largest_against_smallest"] = out[f"{largest}_p99_ms"] / max(out[f"{smallest}_p99_ms"], 1e-6)
    return out
