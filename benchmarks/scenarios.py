"""Each benchmark scenario: a function that measures one figure on the real processes or SQL."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.rows import dict_row

from benchmarks.harness import (
    TENANTS,
    ServicePair,
    backend_cpu,
    cpu_seconds,
    cpu_since,
    median,
    percentile,
    plain_insert_params,
    rss_bytes,
)
from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from shared.storage import queries
from shared.storage.sql_loader import load_sql_blocks

SQL_BATCH = 1000
SUBMIT_BATCH = 1000
# What a user's producer sends per SubmitJobs call in the work-down run "as users run it".
USERS_SUBMIT_BATCH = 500
# Echo work-down: enough slots that a claim returns a full batch.
FAST_WORKER_ENV = {
    "JOBS_WORKER_CONCURRENCY": "1000",
    "JOBS_COMPLETION_BATCH_MAX": "1000",
    "JOBS_COMPLETION_FLUSH_SECONDS": "0.005",
}


_SQL = load_sql_blocks("workdown.sql", package="benchmarks")


def _count_succeeded(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM jobs WHERE state = 'succeeded'").fetchone()[0]


# Two probes of the partial indexes the claim and the lease sweep use: a few rows read however many jobs
# have finished, where counting the finished would scan the table and take the measured system's CPU.
_ANY_UNFINISHED = (
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('pending', 'retry_wait'))"
    " OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
)


def _wait_all_succeeded(url: str, expected: int, timeout: float) -> float:
    """Once every submission is acknowledged: waits for the jobs to finish, checks that `expected`
    succeeded, and returns the database's time of the last completion (epoch seconds)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute(_ANY_UNFINISHED).fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        if _count_succeeded(url) < expected:
            states: dict[str, int] = dict(conn.execute("SELECT state::text, count(*) FROM jobs GROUP BY 1").fetchall())
            raise RuntimeError(f"not all {expected} jobs succeeded in {timeout}s: {states}")
        return conn.execute("SELECT extract(epoch FROM max(finished_at))::float8 FROM jobs").fetchone()[0]


async def bare_sql_lifecycle(url: str, jobs: int) -> float:
    """The same insert / claim / fenced-complete statements, batched, with no gRPC and no handler:
    one connection inserting while another claims and completes. Jobs per second."""
    started = time.time()

    async def submit() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for offset in range(0, jobs, SQL_BATCH):
                n = min(SQL_BATCH, jobs - offset)
                await conn.execute(
                    queries.JOB_INSERT_MANY,
                    plain_insert_params(TENANTS[0], n),
                )

    async def work() -> None:
        done = 0
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
            while done < jobs:
                cur = await conn.execute(
                    queries.JOB_CLAIM_BATCH,
                    {"worker_id": "bench", "kinds": ["echo"], "limit": SQL_BATCH, "lease_seconds": 30},
                )
                claimed = await cur.fetchall()
                if not claimed:
                    await asyncio.sleep(0.001)
                    continue
                await conn.execute(
                    queries.JOB_COMPLETE_BATCH,
                    {
                        "job_ids": [r["job_id"] for r in claimed],
                        "fencing_tokens": [r["fencing_token"] for r in claimed],
                        "results": [r["payload"] for r in claimed],
                        "worker_id": "bench",
                    },
                )
                done += len(claimed)

    await asyncio.gather(submit(), work())
    return jobs / (time.time() - started)


@dataclass(frozen=True)
class WorkDownShape:
    """How a work-down runs: the workers' settings (two replicas) and the jobs per SubmitJobs call."""

    label: str
    worker_env: dict[str, str]
    submit_batch: int

    @property
    def slots(self) -> int:
        return 2 * int(self.worker_env["JOBS_WORKER_CONCURRENCY"])


# The harness's own: a claim returns a full batch, completions wait 5 ms for up to 1,000 others.
HARNESS_SHAPE = WorkDownShape("harness", FAST_WORKER_ENV, SUBMIT_BATCH)


def users_shape(concurrency: int) -> WorkDownShape:
    """As a user runs it: the workers' defaults but their concurrency, SubmitJobs of 500."""
    return WorkDownShape(f"c{concurrency}", {"JOBS_WORKER_CONCURRENCY": str(concurrency)}, USERS_SUBMIT_BATCH)


def work_down(url: str, jobs: int, in_flight: int = 1, shape: WorkDownShape = HARNESS_SHAPE) -> dict[str, float]:
    """`jobs` echo jobs through SubmitJobs (ids only, `in_flight` calls at a time), run by two
    workers, completed through the API: first submit to last completion, jobs per second; and where
    the time went: each process's CPU per job, the submissions' share of the run, and the jobs' waits
    and lease holds by the database's clock."""
    with (
        ServicePair(url, worker_env=shape.worker_env) as pair,
        grpc.insecure_channel(pair.target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel,
        ThreadPoolExecutor(in_flight) as callers,
        psycopg.connect(url, autocommit=True) as observer,
    ):
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        request = [jobs_pb2.SubmitJobRequest(kind="echo", payload=b"x")] * shape.submit_batch
        batches = [
            jobs_pb2.SubmitJobsRequest(jobs=request[: min(shape.submit_batch, jobs - offset)], ids_only=True)
            for offset in range(0, jobs, shape.submit_batch)
        ]
        processes = {"api": [pair.api_pid()], "workers": pair.worker_pids()}
        cpu_before = {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in processes.items()}
        backends_before = backend_cpu(observer)
        started = time.time()
        list(callers.map(lambda batch: stub.SubmitJobs(batch, metadata=pair.metadata(), timeout=60), batches))
        submitted = time.time()
        finished = _wait_all_succeeded(url, jobs, timeout=max(60.0, jobs / 200))
        cpu = {name: sum(cpu_seconds(pid) for pid in pids) - cpu_before[name] for name, pids in processes.items()}
        cpu["postgres"] = cpu_since(backends_before, backend_cpu(observer))
        stamps = observer.execute(_SQL["succeeded_stamps"]).fetchone()
    elapsed = finished - started
    return {
        "jobs_per_s": jobs / elapsed,
        **{f"{name}_cpu_us": seconds / jobs * 1e6 for name, seconds in cpu.items()},
        "submit_share": min((submitted - started) / elapsed, 1.0),
        "wait_mean_ms": stamps[0] * 1000,
        "wait_p50_ms": stamps[1] * 1000,
        "held_mean_ms": stamps[2] * 1000,
        "held_p50_ms": stamps[3] * 1000,
        # Little's law: the leases held on average over the run, against the slots of both replicas.
        "leases_held_mean": jobs / elapsed * stamps[2],
        "slots": shape.slots,
    }


async def _rpc_rate(target: str, make_call, clients: int, seconds: float) -> tuple[float, int]:
    done = 0
    stop_at = time.monotonic() + seconds

    async def client(call) -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            await call()
            done += 1

    async with grpc.aio.insecure_channel(target) as channel:
        calls = [make_call(channel) for _ in range(clients)]
        started = time.monotonic()
        await asyncio.gather(*(client(call) for call in calls))
        return done / (time.monotonic() - started), done


def checkpoint(url: str) -> None:
    """Writes out what earlier scenarios left dirty: a checkpoint their WAL made due would otherwise land
    in the next measurement, every page it touches then written whole to the WAL once more."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def submit_rate(url: str, clients: int = 64, seconds: float = 8.0, turns: int = 4) -> dict[str, float]:
    """Single SubmitJob calls from `clients` concurrent callers vs a no-op RPC on the same server, each
    for `seconds` in all, in alternating turns: one 8-second run of each read from 38% to 62% for the
    same tree, as the machine's other work came and went between them."""
    checkpoint(url)
    with ServicePair(url, workers=0) as pair:

        def health_call(channel):
            stub = health_pb2_grpc.HealthStub(channel)
            return lambda: stub.Check(health_pb2.HealthCheckRequest(), timeout=10)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods

        def submit_call(channel):
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            request = jobs_pb2.SubmitJobRequest(kind="echo", payload=b"x")
            return lambda: stub.SubmitJob(request, metadata=pair.metadata(), timeout=10)

        calls = {health_call: 0.0, submit_call: 0.0}
        acknowledged = 0
        for turn in range(turns):
            for make_call in (health_call, submit_call) if turn % 2 == 0 else (submit_call, health_call):
                rate, done = asyncio.run(_rpc_rate(pair.target, make_call, clients, seconds / turns))
                calls[make_call] += rate / turns
                acknowledged += done if make_call is submit_call else 0
        noop_rate, rate = calls[health_call], calls[submit_call]
    with psycopg.connect(url) as conn:
        stored = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    if stored != acknowledged:
        raise RuntimeError(f"{acknowledged} submissions acknowledged but {stored} stored")
    return {"submit_per_s": rate, "noop_rpc_per_s": noop_rate, "acknowledged": acknowledged}


async def _offer(target: str, metadata, rate: float, seconds: float) -> dict[str, tuple[float, float]]:
    """Submits at a fixed rate; returns job id → (time the call was sent, time it was answered)."""
    answered: dict[str, tuple[float, float]] = {}
    async with grpc.aio.insecure_channel(target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        request = jobs_pb2.SubmitJobRequest(kind="echo", payload=b"x")

        async def one() -> None:
            sent = time.time()
            response = await stub.SubmitJob(request, metadata=metadata, timeout=10)
            answered[response.job.job_id] = (sent, time.time())

        tasks = []
        started = time.monotonic()
        for n in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return answered


def pickup_latency(url: str, rate: float = 200.0, seconds: float = 15.0) -> dict[str, float]:
    """Submit answered → handler started (the claim), at `rate` jobs/s offered, in milliseconds."""
    with ServicePair(url) as pair:
        answered = asyncio.run(_offer(pair.target, pair.metadata(), rate, seconds))
        _wait_all_succeeded(url, len(answered), timeout=60)
    with psycopg.connect(url) as conn:
        started: dict[str, float] = dict(
            conn.execute("SELECT job_id::text, extract(epoch FROM started_at)::float8 FROM jobs").fetchall()
        )
    # The worker is woken by the commit's notification, so it often claims before the caller has read
    # the answer: such pickups count as 0 ms. From the call being sent, for comparison, too.
    latencies = [max(0.0, started[job_id] - at) * 1000 for job_id, (_, at) in answered.items()]
    from_sent = [(started[job_id] - sent) * 1000 for job_id, (sent, _) in answered.items()]
    return {
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "jobs": len(latencies),
        "from_sent_p50_ms": percentile(from_sent, 50),
        "from_sent_p99_ms": percentile(from_sent, 99),
    }


def add_history(url: str, rows: int) -> None:
    """Finished jobs, their events and results, as months of use would leave them."""
    with psycopg.connect(url, autocommit=True) as conn:
        for offset in range(0, rows, 100_000):
            n = min(100_000, rows - offset)
            conn.execute(
                "WITH made AS ("
                " INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, attempts,"
                "  fencing_token, created_at, started_at, finished_at, run_after)"
                " SELECT %s, 'echo', 'succeeded', '\\x78', 3, 3, 1, 1, now() - interval '1 day',"
                "  now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'"
                " FROM generate_series(1, %s) RETURNING job_id, tenant)"
                " INSERT INTO job_results (job_id, tenant, payload, attempt, fencing_token)"
                " SELECT job_id, tenant, '\\x78', 1, 1 FROM made",
                (TENANTS[1], n),
            )
    # Months of history would have been vacuumed and checkpointed long ago; a checkpoint due to the load
    # itself would otherwise land in the measured work-down, its full-page writes counted against it.
    vacuum_and_checkpoint(url)


def vacuum_and_checkpoint(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    checkpoint(url)


def memory_soak(url: str, rate: float = 200.0, seconds: float = 600.0) -> dict[str, float]:
    """A worker replica's RSS while `rate` jobs/s flow for `seconds`: first vs last minute."""
    samples: list[tuple[float, int]] = []
    with ServicePair(url) as pair:
        pid = pair.worker_pids()[0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(5.0):
                samples.append((time.monotonic(), rss_bytes(pid)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        asyncio.run(_offer(pair.target, pair.metadata(TENANTS[1]), rate, seconds))
        stop.set()
        sampler.join()
    window = min(60.0, seconds / 4)
    begin, end = samples[0][0], samples[-1][0]
    # The first window is warm-up (pools, caches, histograms filling); compare the next with the last.
    early: list[float] = [rss for at, rss in samples if begin + window <= at < begin + 2 * window] or [samples[0][1]]
    late: list[float] = [rss for at, rss in samples if at >= end - window]
    return {
        "early_mib": median(early) / 2**20,
        "late_mib": median(late) / 2**20,
        "growth_ratio": median(late) / median(early) - 1.0,
        "seconds": seconds,
    }
