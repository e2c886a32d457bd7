"""Scheduling figures on the real claim and completion statements, with no gRPC and no handler: claimers
on their own connections claim jobs, hold each for the simulated run time, and complete them, either in
step (Drain: claim a batch, hold it, complete it) or as the shipping worker does (SlotDrain).

Sizes come from the environment so that a quick run is possible: BENCH_FLOOD_JOBS (100000),
BENCH_FAIR_B_JOBS (1000), BENCH_FAIR_THROUGHPUT_JOBS (20000), BENCH_CLAIM_ROWS (1000000), BENCH_CLAIM_TENANTS (100).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from benchmarks.harness import median, percentile, plain_insert_params
from shared.storage import queries
from shared.storage.sql_loader import load_sql_blocks

# The claim before fair shares and limits, and its index: what the claim that ships is measured against.
_FIFO = load_sql_blocks("fifo_claim.sql", package="benchmarks")
# The weights and limits of the scheduling setups.
_SIDES = load_sql_blocks("scheduling_sides.sql", package="benchmarks")
# What the figures load besides, and read back.
_SQL = load_sql_blocks("fairness.sql", package="benchmarks")

CLAIMERS = 4
CLAIM_BATCH = 50
INSERT_BATCH = 5000
# How long the claimers run before B's first submission: each session plans the claim's statements at its
# first calls, and on a fresh database those claims take several times a steady one.
WARM_UP_SECONDS = 0.5


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def completion_params(rows: list[dict[str, Any]], worker_id: str) -> dict[str, Any]:
    """JOB_COMPLETE_BATCH's parameters for claimed `rows`, each succeeding with an empty result."""
    return {
        "job_ids": [r["job_id"] for r in rows],
        "fencing_tokens": [r["fencing_token"] for r in rows],
        "results": [b""] * len(rows),
        "worker_id": worker_id,
    }


@dataclass
class Drain:
    """Claimers that claim and complete until `stop` is set or `total` jobs are done."""

    url: str
    kinds: tuple[str, ...] = ("echo",)
    claim_sql: str = queries.JOB_CLAIM_BATCH
    claimers: int = CLAIMERS
    run_seconds: float = 0.0
    batch: int = CLAIM_BATCH
    done: int = 0
    stop: bool = False
    # How long each claim statement took, as its claimer saw it.
    claim_seconds: list[float] = field(default_factory=list)
    # When each claim began and ended, by the wall clock submissions are stamped with; per job claimed, when
    # the claim that took it began; per tenant, the jobs claimed.
    claim_spans: list[tuple[float, float]] = field(default_factory=list)
    taken_at: dict[str, float] = field(default_factory=dict)
    claimed_of: Counter[str] = field(default_factory=Counter)

    async def claim(self, conn: psycopg.AsyncConnection[Any], worker_id: str, limit: int) -> list[dict[str, Any]]:
        began_at = time.time()
        began = time.perf_counter()
        cur = await conn.execute(
            self.claim_sql,
            {"worker_id": worker_id, "kinds": list(self.kinds), "limit": limit, "lease_seconds": 60},
        )
        claimed = await cur.fetchall()
        self.claim_seconds.append(time.perf_counter() - began)
        self.claim_spans.append((began_at, time.time()))
        for row in claimed:
            self.taken_at[str(row["job_id"])] = began_at
            self.claimed_of[row.get("tenant", "")] += 1
        return claimed

    def measure_from_now(self) -> None:
        """Forgets the claims so far (the warm-up's)."""
        self.claim_seconds.clear()
        self.claim_spans.clear()

    def claims_waited(self, acked: dict[str, float]) -> list[int]:
        """Per job of `acked` (its id and when its submission was acknowledged), the claim cycles it waited:
        the claim that took it, and every claim that began after the answer and ended before that one began
        (it could see the job and passed it over). 1 when the first claim to see the job took it, 0 when one
        that began before the answer did. Claims racing the one that took it, which found its row locked
        and went past it, do not count: they were not before it."""
        spans = sorted(self.claim_spans)
        starts = [began for began, _ in spans]
        waited = []
        for job_id, at in acked.items():
            taken = self.taken_at.get(job_id)
            if taken is None:
                continue
            between = spans[bisect.bisect_right(starts, at) : bisect.bisect_left(starts, taken)]
            waited.append(int(taken > at) + sum(1 for _, ended in between if ended < taken))
        return waited

    async def claimer(self, worker_id: str, total: int | None) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            while not self.finished(total):
                claimed = await self.claim(conn, worker_id, self.batch)
                if not claimed:
                    await asyncio.sleep(0.002)
                    continue
                if self.run_seconds:
                    await asyncio.sleep(self.run_seconds)
                await conn.execute(queries.JOB_COMPLETE_BATCH, completion_params(claimed, worker_id))
                self.done += len(claimed)

    def finished(self, total: int | None) -> bool:
        return self.stop or (total is not None and self.done >= total)

    async def run(self, total: int | None = None) -> None:
        await asyncio.gather(*(self.claimer(f"bench-{n}", total) for n in range(self.claimers)))


@dataclass
class SlotDrain(Drain):
    """Claimers shaped like the shipping worker (worker_service/worker.py): each has `batch` slots, claims up
    to its free slots as soon as one frees, runs each job for `run_seconds` on its own, and reports the jobs
    that ended on a connection of their own (the API's group commit), while the next claim runs. A claim that
    found fewer jobs than it asked for waits a poll interval (2 ms) or for a slot to free."""

    async def claimer(self, worker_id: str, total: int | None) -> None:
        loop = asyncio.get_running_loop()
        free = self.batch
        ended: list[dict[str, Any]] = []
        slot_freed = asyncio.Event()

        def end(row: dict[str, Any]) -> None:
            nonlocal free
            ended.append(row)
            free += 1
            slot_freed.set()

        async def report() -> None:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                # Past the end, until every job claimed has run and been reported: none is left running.
                while not self.finished(total) or ended or free < self.batch:
                    if not ended:
                        await asyncio.sleep(0.001)
                        continue
                    batch = ended[:]
                    del ended[:]
                    await conn.execute(queries.JOB_COMPLETE_BATCH, completion_params(batch, worker_id))
                    self.done += len(batch)

        reporter = asyncio.create_task(report())
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            while not self.finished(total):
                slot_freed.clear()
                if free == 0:
                    await slot_freed.wait()
                    continue
                limit = free
                claimed = await self.claim(conn, worker_id, limit)
                free -= len(claimed)
                for row in claimed:
                    loop.call_later(self.run_seconds, end, row)
                if len(claimed) < limit:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(slot_freed.wait(), 0.002)
        await reporter


async def insert_plain(conn: psycopg.AsyncConnection[Any], tenant: str, count: int, kind: str = "echo") -> None:
    for offset in range(0, count, INSERT_BATCH):
        n = min(INSERT_BATCH, count - offset)
        await conn.execute(
            queries.JOB_INSERT_MANY,
            plain_insert_params(tenant, n, kind=kind),
        )


async def trickle_waits(url: str, tenant: str, jobs: int, every_seconds: float) -> dict[str, Any]:
    """Submits `jobs` one at a time at a steady pace. Returns each one's wait from the moment its insert was
    acknowledged to its claim ("acked", what pickup latency measures too), from its insert's own timestamp
    ("created": adds the insert's commit), when each was acknowledged ("acked_at", by job id), and the other
    tenants' jobs still queued after the last one. When those ran out first, only the jobs submitted before
    the others' last start are counted (`counted`)."""
    acked: dict[str, float] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(jobs):
            params = plain_insert_params(tenant, 1)
            await conn.execute(queries.JOB_INSERT_MANY, params)
            job_ids = params["job_ids"]
            assert isinstance(job_ids, list)
            acked[str(job_ids[0])] = time.time()
            await asyncio.sleep(every_seconds)
        cur = await conn.execute(_SQL["others_queued_count"], {"tenant": tenant})
        others_left = (await cur.fetchone() or (0,))[0]
        # When the other tenants' backlog ran out before the last submission, the time their last job
        # started: a job submitted after it waited behind nobody.
        others_ended = None
        if others_left == 0:
            cur = await conn.execute(_SQL["others_last_start"], {"tenant": tenant})
            others_ended = (await cur.fetchone() or (None,))[0]
        deadline = time.monotonic() + 600
        while True:
            cur = await conn.execute(_SQL["tenant_started_select"], {"tenant": tenant})
            rows = [row for row in await cur.fetchall() if row[0] in acked]
            if len(rows) == jobs or time.monotonic() > deadline:
                counted = [row for row in rows if others_ended is None or acked[row[0]] < others_ended]
                return {
                    # The database and this process read the same clock; a claim can beat the answer.
                    "acked": [max(started - acked[job_id], 0.0) for job_id, started, _ in counted],
                    "created": [waited for _, _, waited in counted],
                    "acked_at": {job_id: acked[job_id] for job_id, _, _ in counted},
                    "others_left": others_left,
                    "counted": len(counted),
                }
            await asyncio.sleep(0.05)


async def load_side(conn: psycopg.AsyncConnection[Any], label: str, jobs: int) -> list[str]:
    """One side of the on/off comparison: one tenant's `jobs` and no limits (off), or four tenants of
    weights 1 to 4 sharing them (shares), under non-binding tenant limits and a kind limit of running jobs
    and of rate (on). Returns the tenants."""
    tenants = ["bench-a"] if label == "off" else [f"bench-{t}" for t in "abcd"]
    for tenant in tenants:
        await insert_plain(conn, tenant, jobs // len(tenants))
    if label != "off":
        for n, tenant in enumerate(tenants):
            await conn.execute(_SIDES["tenant_weight_insert"], {"tenant": tenant, "weight": n + 1})
    if label == "on":
        for tenant in tenants:
            await conn.execute(_SIDES["tenant_limit_insert"], {"tenant": tenant})
        await conn.execute(_SIDES["kind_limit_insert"])
    await conn.execute("ANALYZE jobs")
    return tenants


async def throughput_on_against_off(url_off: str, url_on: str, *, on_first: bool = False) -> dict[str, float]:
    """Jobs per second drained by four claimers: one tenant and no limits (off), against four weighted
    tenants under a tenant limit, a kind rate limit and a kind concurrency limit none of which binds (on):
    what the fair order and the enforcement cost. `on_first` runs the "on" side first."""
    jobs = env_int("BENCH_FAIR_THROUGHPUT_JOBS", 20_000)
    out: dict[str, float] = {"jobs": jobs}
    sides = [("off", url_off), ("on", url_on)]
    for label, url in reversed(sides) if on_first else sides:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            # Each side's load and drain in one checkpoint's span: a checkpoint that the WAL of what ran
            # before (the last scenario, the other side) made due would fall in the drain of one side only,
            # and every page the drain then touched would be written whole to the WAL once more.
            await conn.execute("CHECKPOINT")
            tenants = await load_side(conn, label, jobs)
        started = time.monotonic()
        await Drain(url).run(total=jobs // len(tenants) * len(tenants))
        out[f"{label}_jobs_per_s"] = jobs / (time.monotonic() - started)
    out["ratio"] = out["on_jobs_per_s"] / out["off_jobs_per_s"]
    return out


async def claim_cost_on_against_off(urls: dict[str, str], *, held_batches: int = 4) -> dict[str, float]:
    """The claim alone, on the two sides of the drain above and on four weighted tenants without limits
    between them (`urls` by side: off, shares, on): one connection per side claims 50 and completes the
    batch it claimed `held_batches` claims before (by default 200 running, as four claimers hold), the
    sides' claims interleaved so that a busy moment falls on all. No claimer races another, so the figures
    are the claim's own work, steadier than the drain's: what shares, then limits, add to each claim."""
    jobs = env_int("BENCH_FAIR_THROUGHPUT_JOBS", 20_000)
    params = {"worker_id": "bench", "kinds": ["echo"], "limit": CLAIM_BATCH, "lease_seconds": 600}
    async with contextlib.AsyncExitStack() as stack:
        conns = {}
        for label, url in urls.items():
            conn = await stack.enter_async_context(
                await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
            )
            await load_side(conn, label, jobs)
            conns[label] = conn
        times: dict[str, list[float]] = {label: [] for label in urls}
        held: dict[str, list[list[dict[str, Any]]]] = {label: [] for label in urls}
        for n in range(jobs // CLAIM_BATCH):
            for label in list(urls)[:: 1 if n % 2 == 0 else -1]:
                conn = conns[label]
                began = time.perf_counter()
                claimed = await (await conn.execute(queries.JOB_CLAIM_BATCH, params)).fetchall()
                times[label].append(time.perf_counter() - began)
                held[label].append(claimed)
                if len(held[label]) > held_batches:
                    done = held[label].pop(0)
                    await conn.execute(queries.JOB_COMPLETE_BATCH, completion_params(done, "bench"))
    out: dict[str, float] = {"claims": len(times["on"]), "running": held_batches * CLAIM_BATCH}
    for label in urls:
        out[f"{label}_claim_mean_ms"] = sum(times[label]) / len(times[label]) * 1000
        out[f"{label}_claim_p50_ms"] = median(times[label]) * 1000
    out["ratio"] = out["on_claim_mean_ms"] / out["off_claim_mean_ms"]
    out["shares_ratio"] = out["shares_claim_mean_ms"] / out["off_claim_mean_ms"]
    return out


async def fair_claim_against_fifo(url_fifo: str, url_fair: str) -> dict[str, float]:
    """The claim that ships against the FIFO claim it replaced, each in a database of its own with one
    tenant's jobs (the FIFO one with its own index): four claimers draining BENCH_FAIR_THROUGHPUT_JOBS,
    then single claims of 50 with BENCH_FLOOD_JOBS queued and 200 running, rolled back."""
    jobs, queued = env_int("BENCH_FAIR_THROUGHPUT_JOBS", 20_000), env_int("BENCH_FLOOD_JOBS", 100_000)
    out: dict[str, float] = {"jobs": jobs, "queued": queued}
    for label, url, claim_sql in (
        ("fifo", url_fifo, _FIFO["fifo_claim_batch"]),
        ("fair", url_fair, queries.JOB_CLAIM_BATCH),
    ):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
            if label == "fifo":
                await conn.execute(_FIFO["fifo_index"])
            await insert_plain(conn, "bench-a", jobs)
            await conn.execute("ANALYZE jobs")
            started = time.monotonic()
            await Drain(url, claim_sql=claim_sql).run(total=jobs)
            out[f"{label}_jobs_per_s"] = jobs / (time.monotonic() - started)
            await insert_plain(conn, "bench-a", queued)
            await conn.execute("VACUUM ANALYZE jobs")
            params = {"worker_id": "b", "kinds": ["echo"], "limit": CLAIM_BATCH, "lease_seconds": 600}
            for _ in range(4):  # 200 running, as four claimers would hold
                await conn.execute(claim_sql, params)
            times = []
            for _ in range(50):
                async with conn.transaction(force_rollback=True):
                    began = time.perf_counter()
                    await (await conn.execute(claim_sql, params)).fetchall()
                    times.append(time.perf_counter() - began)
            out[f"{label}_claim_p50_ms"] = median(times) * 1000
            out[f"{label}_claim_p99_ms"] = percentile(times, 99) * 1000
    out["ratio"] = out["fair_jobs_per_s"] / out["fifo_jobs_per_s"]
    return out


def claim_time_at_scale(url: str) -> dict[str, float]:
    """One claim of 50 with BENCH_CLAIM_ROWS pending rows of one tenant and BENCH_CLAIM_TENANTS tenants
    of five each, rolled back so every claim sees the same queue; with and without a limit in force."""
    rows, tenants = env_int("BENCH_CLAIM_ROWS", 1_000_000), env_int("BENCH_CLAIM_TENANTS", 100)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SQL["big_tenant_insert"], {"rows": rows})
        conn.execute(_SQL["small_tenants_insert"], {"tenants": tenants})
        conn.execute("VACUUM ANALYZE jobs")
    out: dict[str, float] = {"rows": rows, "tenants": tenants}
    with psycopg.connect(url, row_factory=dict_row) as conn:
        for label in ("plain", "limited"):
            if label == "limited":
                conn.execute(_SQL["big_tenant_limits_insert"])
                conn.commit()
            times, reached = [], 0
            for _ in range(30):
                started = time.perf_counter()
                claimed = conn.execute(
                    queries.JOB_CLAIM_BATCH, {"worker_id": "b", "kinds": ["echo"], "limit": 50, "lease_seconds": 30}
                ).fetchall()
                times.append(time.perf_counter() - started)
                reached = len({r["tenant"] for r in claimed})
                conn.rollback()
            out[f"{label}_p50_ms"] = median(times) * 1000
            out[f"{label}_p99_ms"] = percentile(times, 99) * 1000
            out[f"{label}_tenants_in_batch"] = reached
    return out


async def limit_overshoot(url: str) -> dict[str, float]:
    """Four racing claimers over a key limited to 3; the most jobs of the key running at once by the
    database's own stamps (claim's started_at to completion's finished_at), minus the limit."""
    limit, jobs = 3, env_int("BENCH_OVERSHOOT_JOBS", 2000)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(_SQL["kind_running_limit_insert"], {"max_running": limit})
        for tenant in ("bench-a", "bench-b"):
            await insert_plain(conn, tenant, jobs // 2)
    drain = Drain(url, batch=random.Random(0).randint(2, 5))
    await drain.run(total=jobs)
    with psycopg.connect(url) as conn:
        rows = conn.execute(_SQL["succeeded_spans_select"]).fetchall()
    edges = sorted([(r[0], 1) for r in rows] + [(r[1], -1) for r in rows])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return {"jobs": len(rows), "limit": limit, "most_running": most, "overshoot": most - limit}
