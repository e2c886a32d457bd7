"""PgQueuer's own enqueue and drain of N no-op jobs, for the side-by-side figure of `make bench`.

Runs in the benchmark venv of its own (.bench-venv, see benchmarks/pgqueuer-requirements.txt), not in
the project's: it imports only PgQueuer, asyncpg and the standard library. Usage:

    .bench-venv/bin/python benchmarks/pgqueuer_peer.py DATABASE_URL JOBS [BATCH] [DEQUEUERS] [PRODUCERS]

It installs PgQueuer's schema (durable tables, its default) into the empty database it is given,
enqueues JOBS jobs in batches of BATCH from PRODUCERS producers (1; each on its own connection, one
statement in flight each: the counterpart of the work-down's calls in flight), then drains them with DEQUEUERS queue
managers (each on its own connection, batch size BATCH) in drain mode, and prints one JSON line:
{"enqueue_per_s", "drain_per_s", "combined_per_s", "left", and where the time went}. combined is the
harmonic combination jobs / (enqueue seconds + drain seconds), the end-to-end rate of enqueue-then-drain.
Where the time went: this process's CPU and its server sessions' CPU per job in each phase (read from
/proc before the sessions close), and the mean time from a job's pick to its logged success.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

import asyncpg
from pgqueuer import types
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

ENTRYPOINT = "echo"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# From a job's pick to its success, both logged by PgQueuer's own statements (transaction times).
_PICK_TO_DONE = """
SELECT avg(extract(epoch FROM done.created - picked.created))::float8
FROM pgqueuer_log AS picked
JOIN pgqueuer_log AS done ON done.job_id = picked.job_id AND done.status = 'successful'
WHERE picked.status = 'picked'
"""


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float:
    # utime and stime are the 14th and 15th fields; the command before them, in parentheses, may hold spaces.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


async def sessions_cpu_seconds(connections: list[asyncpg.Connection]) -> float:
    """The CPU the server processes behind `connections` have used, from /proc (they are local)."""
    pids = [await connection.fetchval("SELECT pg_backend_pid()") for connection in connections]
    return sum(map(process_cpu_seconds, pids))


async def enqueue(url: str, jobs: int, batch: int, producers: int = 1) -> tuple[float, float]:
    """Seconds to enqueue `jobs` jobs, `batch` per statement, from `producers` producers at once, and
    the CPU seconds of their server sessions."""
    connections = [await asyncpg.connect(url) for _ in range(producers)]
    batches = [min(batch, jobs - offset) for offset in range(0, jobs, batch)]

    async def produce(connection: asyncpg.Connection, sizes: list[int]) -> None:
        queries = Queries(AsyncpgDriver(connection))
        for n in sizes:
            await queries.enqueue([ENTRYPOINT] * n, [b"x"] * n, [0] * n)

    try:
        started = time.monotonic()
        await asyncio.gather(*(produce(c, batches[i::producers]) for i, c in enumerate(connections)))
        return time.monotonic() - started, await sessions_cpu_seconds(connections)
    finally:
        for connection in connections:
            await connection.close()


async def drain(url: str, jobs: int, batch: int, dequeuers: int) -> tuple[float, int, float]:
    """Seconds until `dequeuers` queue managers in drain mode have run every job and stopped, the jobs
    run, and the CPU seconds of the managers' server sessions."""
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
        sessions = await sessions_cpu_seconds(connections)
    finally:
        for connection in connections:
            await connection.close()
    return elapsed, done, sessions


async def main(url: str, jobs: int, batch: int, dequeuers: int, producers: int) -> dict[str, float]:
    connection = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(connection)).install()
    finally:
        await connection.close()
    cpu_start = own_cpu_seconds()
    enqueue_seconds, enqueue_sessions = await enqueue(url, jobs, batch, producers)
    cpu_enqueued = own_cpu_seconds()
    drain_seconds, done, drain_sessions = await drain(url, jobs, batch, dequeuers)
    cpu_drained = own_cpu_seconds()
    connection = await asyncpg.connect(url)
    try:
        left = await connection.fetchval("SELECT count(*) FROM pgqueuer")
        pick_to_done = await connection.fetchval(_PICK_TO_DONE)
    finally:
        await connection.close()
    if done != jobs:
        raise RuntimeError(f"PgQueuer ran {done} of {jobs} jobs ({left} left queued)")
    return {
        "enqueue_per_s": jobs / enqueue_seconds,
        "drain_per_s": jobs / drain_seconds,
        "combined_per_s": jobs / (enqueue_seconds + drain_seconds),
        "left": left,
        "enqueue_python_cpu_us": (cpu_enqueued - cpu_start) / jobs * 1e6,
        "enqueue_postgres_cpu_us": enqueue_sessions / jobs * 1e6,
        "drain_python_cpu_us": (cpu_drained - cpu_enqueued) / jobs * 1e6,
        "drain_postgres_cpu_us": drain_sessions / jobs * 1e6,
        "picked_to_done_ms": (pick_to_done or 0.0) * 1000,
    }


if __name__ == "__main__":
    url_arg, jobs_arg = sys.argv[1], int(sys.argv[2])
    batch_arg = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    dequeuers_arg = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    producers_arg = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    print(json.dumps(asyncio.run(main(url_arg, jobs_arg, batch_arg, dequeuers_arg, producers_arg))))
