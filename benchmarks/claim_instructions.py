"""Instructions per claim and completion of 50 on the three sides of the scheduling figures (one tenant
without limits, four weighted tenants, the same under limits), counted by callgrind in a single-user
backend. Timings of the same code on this machine range over ten points from one run to the next; an
instruction count does not move with the machine's load, so it tells a change of a few percent apart.

Each side is loaded as `fairness.load_side` loads it, with 200 jobs running (held by another worker),
in a private server of the benchmark's own. The server is stopped, and a copy of its data runs `short`
then `long` cycles (the claim, the service's own completion statement, and the bookkeeping between, the
same on every side) in `postgres --single` under callgrind: the difference over the extra cycles leaves
out the start, the first plans and the compilation. Needs valgrind (`make system-deps`)."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess

import psycopg
from psycopg.rows import dict_row

from benchmarks import fairness
from benchmarks.harness import free_port
from shared.storage import queries
from shared.storage.migrator import migrate
from shared.storage.sql_loader import load_sql_blocks
from tests.private_postgres import PrivatePostgres

# The statements of a cycle around the claim and the completion.
_CYCLE = load_sql_blocks("claim_cycle.sql", package="benchmarks")

SIDES = ("off", "shares", "on")
HELD_BATCHES = 4
RUN_TIMEOUT_SECONDS = 900


def valgrind_missing() -> bool:
    return shutil.which("valgrind") is None


def _cycle() -> str:
    """One claim of 50 and its completion by the service's own statement, as single-user commands (each
    ends with a semicolon and a blank line: `postgres --single -j`). The claimed rows pass between the two
    through a table, since a single-user backend binds no parameters. Under callgrind a cycle takes about
    a second, longer than a session's claim remembers the rooms it counted (jobs_claim in
    0033_claim_statements_merged.sql); in a drain the next claim comes a few milliseconds later, so each
    cycle dates the remembered rooms, as its last claim counted them, to the moment before its claim."""
    claimed = "FROM bench_claimed AS c"
    completion = (
        queries.JOB_COMPLETE_BATCH.replace("%(job_ids)b", f"(SELECT array_agg(c.job_id) {claimed})")
        .replace("%(fencing_tokens)b", f"(SELECT array_agg(c.fencing_token) {claimed})")
        .replace("%(results)b", f"(SELECT array_agg(''::bytea) {claimed})")
        .replace("%(worker_id)s", "'bench'")
    )
    statements = (
        _CYCLE["remembered_rooms_now"],
        _CYCLE["claim_into_table"],
        _CYCLE["claimed_count"],
        completion.strip().rstrip(";"),
        _CYCLE["claimed_clear"],
    )
    return "".join(f"{statement};\n\n" for statement in statements)


async def _load(url: str, side: str, jobs: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        await fairness.load_side(conn, side, jobs)
        await conn.execute(_CYCLE["claimed_table_create"])
        params = {"worker_id": "held", "kinds": ["echo"], "limit": fairness.CLAIM_BATCH, "lease_seconds": 86400}
        for _ in range(HELD_BATCHES):
            await (await conn.execute(queries.JOB_CLAIM_BATCH, params)).fetchall()
        await conn.execute("VACUUM ANALYZE")


def _instructions(server: PrivatePostgres, database: str, cycles: int) -> int:
    """Instructions a single-user backend runs for `cycles` cycles, on a copy of the stopped server's data."""
    copy = server.root / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    server.copy_data(copy)
    out = server.root / "callgrind.out"
    done = subprocess.run(
        server.command(
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            str(server.program("postgres")),
            "--single",
            "-j",
            "-D",
            str(copy),
            database,
        ),
        input=_cycle() * cycles,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    shutil.rmtree(copy, ignore_errors=True)
    if "ERROR" in done.stdout or done.returncode != 0:
        raise RuntimeError(f"single-user run failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    claimed = re.findall(r'claimed = "(\d+)"', done.stdout)
    if claimed != [str(fairness.CLAIM_BATCH)] * cycles:
        raise RuntimeError(f"claims of other than {fairness.CLAIM_BATCH}: {claimed}")
    collected = re.search(r"Collected : (\d+)", done.stderr)
    if collected is None:
        raise RuntimeError(f"no count from callgrind: {done.stderr[-2000:]}")
    return int(collected.group(1))


def claim_instructions(short: int = 10, long: int = 50) -> dict[str, float]:
    """Millions of instructions per cycle on each side, and each side against one tenant without limits."""
    jobs = fairness.env_int("BENCH_FAIR_THROUGHPUT_JOBS", 20_000)
    server = PrivatePostgres(free_port())
    try:
        server.start()
        # Each side's tables settled (hint bits, visibility, statistics) by one VACUUM after its load, not
        # by whatever autovacuum happened to reach while it loaded.
        with psycopg.connect(server.admin_url(), autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET autovacuum = off")
            admin.execute("SELECT pg_reload_conf()")
        for side in SIDES:
            with psycopg.connect(server.admin_url(), autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE claim_{side}")
            url = server.admin_url(f"claim_{side}")
            migrate(url)
            asyncio.run(_load(url, side, jobs))
        server.stop()
        out: dict[str, float] = {"cycles": long - short, "running": HELD_BATCHES * fairness.CLAIM_BATCH}
        for side in SIDES:
            extra = _instructions(server, f"claim_{side}", long) - _instructions(server, f"claim_{side}", short)
            out[f"{side}_minstr_per_cycle"] = extra / (long - short) / 1e6
        out["ratio"] = out["on_minstr_per_cycle"] / out["off_minstr_per_cycle"]
        out["shares_ratio"] = out["shares_minstr_per_cycle"] / out["off_minstr_per_cycle"]
        return out
    finally:
        server.destroy()
