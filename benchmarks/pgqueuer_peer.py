"""PgQueuer's own enqueue and drain of N no-op jobs, for the side-by-side figure of `make bench`.

Runs in the benchmark venv of its own (.bench-venv, see benchmarks/pgqueuer-requirements.txt), not in
the project's: it imports only PgQueuer, asyncpg and the standard library. Usage:

    .bench-venv/bin/python benchmarks/pgqueuer_peer.py DATABASE_URL JOBS [BATCH] [DEQUEUERS] [PRODUCERS]

It installs PgQueuer's schema (durable tables, its default) into the empty database it is given,
enqueues JOBS jobs in batches of BATCH from PRODUCERS producers (1; each on its own connection, one
statement in flight each: the counterpart of the work-down's calls in flight), then drains them with DEQUEUERS queue
managers (each on its own connection, batch size BATCH) in drain mode, and prints one JSON line:
{"enqueue_per_s", "drain_per_s", "combined_per_s", "left"}. combined is the harmonic combination
jobs / (enqueue seconds + drain seconds), the end-to-end rate of enqueue-then-drain.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
from pgqueuer import types
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

ENTRYPOINT = "echo"


async def enqueue(url: str, jobs: int, batch: int, producers: int = 1) -> float:
    """Seconds to enqueue `jobs` jobs, `batch` per statement, from `producers` producers at once."""
    connections = [await asyncpg.connect(url) for _ in range(producers)]
    batches = [min(batch, jobs - offset) for offset in range(0, jobs, batch)]

    async def produce(connection: asyncpg.Connection, sizes: list[int]) -> None:
        queries = Queries(AsyncpgDriver(connection))
        for n in sizes:
            await queries.enqueue([ENTRYPOINT] * n, [b"x"] * n, [0] * n)

    try:
        started = time.monotonic()
        await asyncio.gather(*(produce(c, batches[i::producers]) for i, c in enumerate(connections)))
        return time.monotonic() - started
    finally:
        for connection in connections:
            await connection.close()


async def drain(url: str, jobs: int, batch: int, dequeuers: int) -> tuple[float, int]:
    """Seconds until `dequeuers` queue managers in drain mode have run every job and stopped."""
    connections = [await asyncpg.connect(url) for _ in range(dequeuers)]
    done = 0

    async def echo(job: Job) -> None:
        nonlocal done
        done += 1

    managers = []
    for connection in connections:
        manager = QueueManager(Queries(AsyncpgDriver(connection)))
        manager.entrypoint(ENTRYPOINT)(echo)
        managers.append(manager)
    try:
        started = time.monotonic()
        await asyncio.gather(*(m.run(batch_size=batch, mode=types.QueueExecutionMode.drain) for m in managers))
        elapsed = time.monotonic() - started
    finally:
        for connection in connections:
            await connection.close()
    return elapsed, done


async def main(url: str, jobs: int, batch: int, dequeuers: int, producers: int) -> dict[str, float]:
    connection = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()
    enqueue_seconds = await enqueue(url, jobs, batch, producers)
    drain_seconds, done = await drain(url, jobs, batch, dequeuers)
    connection = await asyncpg.connect(url)
    try:
        left = await connection.fetchval("SELECT count(*) FROM pgqueuer")
    finally:
        await connection.close()
    if done != jobs:
        raise RuntimeError(f"PgQueuer ran {done} of {jobs} jobs ({left} left queued)")
    return {
        "enqueue_per_s": jobs / enqueue_seconds,
        "drain_per_s": jobs / drain_seconds,
        "combined_per_s": jobs / (enqueue_seconds + drain_seconds),
        "left": left,
    }


if __name__ == "__main__":
    url_arg, jobs_arg = sys.argv[1], int(sys.argv[2])
    batch_arg = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    dequeuers_arg = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    producers_arg = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    print(json.dumps(asyncio.run(main(url_arg, jobs_arg, batch_arg, dequeuers_arg, producers_arg))))
