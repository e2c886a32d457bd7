"""Per-tenant backpressure on submissions: a rate (token bucket) and a cap on jobs waiting to run.

Both answer RESOURCE_EXHAUSTED with the time after which a retry can succeed. The rate is kept in this
process, so with N API replicas behind a balancer a tenant gets up to N times the configured rate. The
waiting-jobs cap is read from the database, at most once per `recount_seconds` per tenant and replica,
with a count that stops at the cap: it may be overshot by what replicas admit between two counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from shared.domain.errors import ResourceExhausted
from shared.domain.ids import TenantId
from shared.storage import job_store
from shared.storage.database import Database

SUBMIT_RATE_PER_SECOND_DEFAULT = 1000.0
SUBMIT_BURST_DEFAULT = 5000
MAX_QUEUED_JOBS_DEFAULT = 100_000
RECOUNT_SECONDS_DEFAULT = 1.0


@dataclass(frozen=True)
class TenantLimits:
    """0 turns a limit off."""

    submit_rate_per_second: float = SUBMIT_RATE_PER_SECOND_DEFAULT
    submit_burst: int = SUBMIT_BURST_DEFAULT
    max_queued_jobs: int = MAX_QUEUED_JOBS_DEFAULT
    recount_seconds: float = RECOUNT_SECONDS_DEFAULT


class TokenBucket:
    def __init__(self, rate_per_second: float, burst: int, now: float) -> None:
        self._rate = rate_per_second
        self._burst = burst
        self._tokens = float(burst)
        self._updated = now

    def take(self, count: int, now: float) -> float:
        """Takes `count` tokens and returns 0, or takes nothing and returns the seconds until it could.
        A request larger than the burst waits for a full bucket, then leaves it in debt."""
        self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._rate)
        self._updated = now
        needed = min(count, self._burst)
        if self._tokens >= needed:
            self._tokens -= count
            return 0.0
        return (needed - self._tokens) / self._rate


@dataclass
class _QueuedCount:
    counted: int
    counted_at: float
    admitted_since: int = 0


class SubmissionAdmission:
    def __init__(self, db: Database, limits: TenantLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._limits = limits
        self._clock = clock
        self._buckets: dict[TenantId, TokenBucket] = {}
        self._queued: dict[TenantId, _QueuedCount] = {}
        self._recounting: dict[TenantId, asyncio.Lock] = {}

    async def admit(self, tenant: TenantId, count: int) -> None:
        """Raises ResourceExhausted when the tenant is over its rate or its waiting-jobs cap."""
        self._check_rate(tenant, count)
        if self._limits.max_queued_jobs:
            await self._check_queued(tenant, count)

    def _check_rate(self, tenant: TenantId, count: int) -> None:
        limits = self._limits
        if not limits.submit_rate_per_second:
            return
        now = self._clock()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(limits.submit_rate_per_second, limits.submit_burst, now)
        wait = bucket.take(count, now)
        if wait:
            raise ResourceExhausted(
                f"over the submission rate of {limits.submit_rate_per_second:g} jobs per second",
                retry_after_seconds=wait,
            )

    async def _check_queued(self, tenant: TenantId, count: int) -> None:
        queued = await self._fresh_count(tenant)
        cap = self._limits.max_queued_jobs
        if queued.counted + queued.admitted_since + count > cap:
            raise ResourceExhausted(
                f"at most {cap} jobs may wait to run; let some finish first",
                retry_after_seconds=self._limits.recount_seconds,
            )
        queued.admitted_since += count

    async def _fresh_count(self, tenant: TenantId) -> _QueuedCount:
        """One count per tenant at a time; concurrent callers share its answer."""
        queued = self._queued.get(tenant)
        if queued is not None and self._clock() - queued.counted_at < self._limits.recount_seconds:
            return queued
        lock = self._recounting.setdefault(tenant, asyncio.Lock())
        async with lock:
            queued = self._queued.get(tenant)
            if queued is not None and self._clock() - queued.counted_at < self._limits.recount_seconds:
                return queued
            counted_at = self._clock()
            async with self._db.transaction(tenant) as conn:
                counted = await job_store.count_queued(conn, tenant, up_to=self._limits.max_queued_jobs + 1)
            queued = self._queued[tenant] = _QueuedCount(counted, counted_at)
            return queued
