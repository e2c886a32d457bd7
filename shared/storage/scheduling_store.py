"""Scheduling state the claim respects: keys a submission adds, provider holds, why a job waits, and the
charges to rate buckets folded in."""

from __future__ import annotations

from datetime import datetime

from shared.domain.ids import JobId, TenantId
from shared.domain.limit_keys import SubmissionKeys, WaitingReason
from shared.storage import queries
from shared.storage.database import Connection


async def set_limit_keys(conn: Connection, tenant: TenantId, job_id: JobId, keys: SubmissionKeys) -> None:
    """Stores a submission's own keys on its job, in the transaction that inserted it."""
    if keys.keys:
        await conn.execute(
            queries.JOB_SET_LIMIT_KEYS,
            {"tenant": tenant, "job_id": job_id, "keys": list(keys.keys), "bounds": list(keys.bounds)},
        )


async def hold_key(conn: Connection, key: str, until: datetime) -> datetime:
    """Holds `key` until `until` (a provider's Retry-After): no job carrying it is claimed before then.
    A later hold already in force is kept. Returns the hold in force."""
    cur = await conn.execute(queries.KEY_HOLD, {"key": key, "until": until})
    row = await cur.fetchone()
    assert row is not None
    held_until: datetime = row["held_until"]
    return held_until


async def hold_pushed_key(conn: Connection, job_id: JobId, key: str) -> datetime | None:
    """After a pushback: holds `key` until the job's next run, for every job that carries it. Only a key
    the job carried when claimed can be held (`tenant:<t>/<name>` also by its `<name>`); None otherwise."""
    cur = await conn.execute(queries.JOB_HOLD_PUSHED_KEY, {"job_id": job_id, "key": key})
    row = await cur.fetchone()
    return row["held_until"] if row else None


async def waiting_reason(conn: Connection, tenant: TenantId, job_id: JobId) -> WaitingReason | None:
    """Computed on read for one job; None when the job is not runnable-but-held (or not this tenant's)."""
    cur = await conn.execute(queries.JOB_WAITING_REASON, {"tenant": tenant, "job_id": job_id})
    row = await cur.fetchone()
    return WaitingReason(row["reason"], row["key"]) if row else None


async def charged_keys(conn: Connection) -> list[str]:
    """The keys with charges made under their shared lock that are not yet folded into their buckets."""
    cur = await conn.execute(queries.KEY_CHARGES_KEYS)
    return [row["key"] for row in await cur.fetchall()]


async def fold_key_charges(conn: Connection, key: str) -> int:
    """Folds `key`'s charges into its bucket under the key's lock held alone (claims under it wait for the
    moment of the fold); the tokens a claim may take are unchanged. Returns the tokens folded."""
    cur = await conn.execute(queries.KEY_CHARGES_FOLD, {"key": key})
    row = await cur.fetchone()
    assert row is not None
    return int(row["folded"])


async def tend_running_tallies(conn: Connection) -> list[str]:
    """Folds the running tallies kept by backends that have exited into one row per key, then compares
    every key's tally with a count of its running rows in one snapshot and corrects the difference.
    Returns the keys corrected: none, unless jobs were changed with the jobs table's triggers disabled."""
    cur = await conn.execute(queries.RUNNING_TALLIES_TEND)
    row = await cur.fetchone()
    assert row is not None
    return list(row["corrected"])
