"""This replica's result cache: a bounded TTL map of answers that never change, and loads shared per key.

An answer may be kept only if no later write can change it. A stored result is written once and never
changed, so an entry for (tenant, job id) is always right; an entry for a latest result is keyed by the
resource version it answers for, and the version comes from a read that began after the request arrived,
so an old version's entry is never consulted for a newer head. Nothing is ever deleted to stay correct.
docs/CACHE.md gives the whole argument.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import cachetools

from api_service.metrics import ResultCacheMetrics
from shared.domain.errors import FailedPrecondition, NotFound, ResourceExhausted

V = TypeVar("V")

# Answers that a later read can contradict (the job has finished since, the job exists since). A caller
# that joined a read which had begun before it arrived does not trust them: it reads again.
_ANSWERS_THAT_AGE = (NotFound, FailedPrecondition)
BUSY_RETRY_AFTER_SECONDS = 0.1


@dataclass(frozen=True)
class ResultCacheLimits:
    max_entries: int = 10_000
    # Payload bytes plus a fixed estimate per entry (ENTRY_OVERHEAD_BYTES in job_queries).
    max_bytes: int = 64 * 1024 * 1024
    ttl_seconds: float = 300.0
    # Distinct keys being read from the database at once; one more gets RESOURCE_EXHAUSTED.
    max_loads_in_flight: int = 128


@dataclass(eq=False)
class _Load:
    loader: Callable[[], Awaitable[Any]]
    outcome: asyncio.Future[Any]
    # Set when the load starts; loads started later have higher numbers.
    epoch: int = 0


class SingleFlight:
    """Concurrent loads of one key share one call of its loader. The loader runs in a task of its own, so
    a caller that goes away (a cancelled RPC) neither cancels the load for the others nor wedges the key,
    and a failure is handed to the callers of that load only."""

    def __init__(self, max_keys: int) -> None:
        self._max_keys = max_keys
        self._running: dict[Hashable, _Load] = {}
        # At most one per running key: the load that starts as soon as the running one ends.
        self._queued: dict[Hashable, _Load] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """How many loads have started so far."""
        return self._epoch

    def join(
        self, key: Hashable, loader: Callable[[], Awaitable[Any]], *, started_after: int | None = None
    ) -> tuple[_Load, bool]:
        """The load of `key` to wait for, and whether this call created it. With `started_after`, a load
        that started at or before that epoch is not joined: the caller gets the next one, whose answer
        is read after the caller arrived. Raises ResourceExhausted when too many keys are loading."""
        running = self._running.get(key)
        if running is not None and (started_after is None or running.epoch > started_after):
            return running, False
        if running is not None:
            queued = self._queued.get(key)
            if queued is not None:
                return queued, False
            self._queued[key] = queued = _Load(loader, asyncio.get_running_loop().create_future())
            return queued, True
        if len(self._running) >= self._max_keys:
            raise ResourceExhausted(
                "too many different results are being read at once; try again",
                retry_after_seconds=BUSY_RETRY_AFTER_SECONDS,
            )
        load = _Load(loader, asyncio.get_running_loop().create_future())
        self._start(key, load)
        return load, True

    def _start(self, key: Hashable, load: _Load) -> None:
        self._epoch += 1
        load.epoch = self._epoch
        self._running[key] = load
        # A fresh context: a load serves every caller of its key, so no one caller's deadline
        # (database.call_deadline) may bound it, least of all one whose call has already ended.
        task = asyncio.create_task(self._run(key, load), context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Hashable, load: _Load) -> None:
        cancelled = False
        try:
            load.outcome.set_result(await load.loader())
        except asyncio.CancelledError:
            cancelled = True
            load.outcome.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - every failure goes to this load's callers, none is kept
            load.outcome.set_exception(error)
            load.outcome.exception()  # retrieved, so callers that went away leave no "never retrieved" log
        finally:
            del self._running[key]
            queued = self._queued.pop(key, None)
            if queued is not None:
                if cancelled:
                    queued.outcome.cancel()
                else:
                    self._start(key, queued)


@dataclass(frozen=True)
class _Entry:
    value: Any
    size: int


_Dropped = Callable[[str, list[tuple[Hashable, "_Entry"]]], None]


class _Entries(cachetools.TTLCache[Hashable, _Entry, float]):
    """cachetools' TTL map (LRU within the TTL, bounded by the sum of getsizeof), telling what it drops."""

    def __init__(self, limits: ResultCacheLimits, timer: Callable[[], float], dropped: _Dropped) -> None:
        super().__init__(
            maxsize=limits.max_bytes, ttl=limits.ttl_seconds, timer=timer, getsizeof=lambda entry: entry.size
        )
        self._dropped = dropped

    def popitem(self) -> tuple[Hashable, _Entry]:
        item = super().popitem()
        self._dropped("capacity", [item])
        return item

    def expire(self, time: float | None = None) -> list[tuple[Hashable, _Entry]]:
        expired = super().expire(time)
        if expired:
            self._dropped("expired", expired)
        return expired


class ResultCache:
    """Answers by key, bounded in entries and in bytes, each kept at most `ttl_seconds`. Only values are
    kept; an error (not found, not ready, database down) never is."""

    def __init__(
        self,
        limits: ResultCacheLimits,
        metrics: ResultCacheMetrics | None = None,
        *,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = limits
        self._metrics = metrics or ResultCacheMetrics()
        self._entries = _Entries(limits, timer, self._forget)
        self._loads = SingleFlight(limits.max_loads_in_flight)
        self._bytes = 0

    @property
    def held(self) -> tuple[int, int]:
        """Entries and accounted bytes, expired ones not yet dropped included (they still take memory)."""
        return cachetools.Cache.__len__(self._entries), self._bytes

    async def get(
        self, key: Hashable, loader: Callable[[], Awaitable[V]], *, size_of: Callable[[V], int], read: str
    ) -> V:
        """The kept answer for `key`, else the loader's: shared with concurrent callers, then kept."""
        entry = self._entries.get(key)
        if entry is not None:
            self._metrics.lookup(read, "hit")
            kept: V = entry.value  # what this key's loader returned: the caller's V
            return kept
        arrived = self._loads.epoch
        load = self._join(key, self._loading_and_keeping(key, loader, size_of, read), read)
        try:
            return await asyncio.shield(load.outcome)
        except _ANSWERS_THAT_AGE:
            if load.epoch > arrived:
                raise
        entry = self._entries.get(key)  # a later load may have kept the answer meanwhile
        if entry is not None:
            self._metrics.lookup(read, "hit")
            kept_meanwhile: V = entry.value
            return kept_meanwhile
        load = self._join(key, self._loading_and_keeping(key, loader, size_of, read), read, started_after=arrived)
        return await asyncio.shield(load.outcome)

    async def read_fresh(self, key: Hashable, loader: Callable[[], Awaitable[V]], *, read: str) -> V:
        """The loader's answer from a read that began after this call, shared with concurrent callers
        whose own calls came before that read began. Nothing is kept."""
        load = self._join(key, self._counted(loader, read), read, started_after=self._loads.epoch)
        return await asyncio.shield(load.outcome)

    def _join(
        self, key: Hashable, loader: Callable[[], Awaitable[Any]], read: str, *, started_after: int | None = None
    ) -> _Load:
        try:
            load, created = self._loads.join(key, loader, started_after=started_after)
        except ResourceExhausted:
            self._metrics.lookup(read, "rejected")
            raise
        self._metrics.lookup(read, "miss" if created else "coalesced")
        return load

    def _counted(self, loader: Callable[[], Awaitable[V]], read: str) -> Callable[[], Awaitable[V]]:
        async def load() -> V:
            self._metrics.loaded(read)
            return await loader()

        return load

    def _loading_and_keeping(
        self, key: Hashable, loader: Callable[[], Awaitable[V]], size_of: Callable[[V], int], read: str
    ) -> Callable[[], Awaitable[V]]:
        async def load() -> V:
            self._metrics.loaded(read)
            value = await loader()
            self._keep(key, _Entry(value, size_of(value)))
            return value

        return load

    def _keep(self, key: Hashable, entry: _Entry) -> None:
        if self._limits.max_entries < 1 or entry.size > self._limits.max_bytes:
            return  # served, not kept: caching is off, or this one answer would push out everything else
        self._entries.expire()
        if key in self._entries:
            return  # a load that followed one which kept it: the same immutable answer
        while cachetools.Cache.__len__(self._entries) >= self._limits.max_entries:
            self._entries.popitem()
        self._entries[key] = entry
        self._bytes += entry.size
        self._metrics.held(*self.held)

    def _forget(self, reason: str, items: list[tuple[Hashable, _Entry]]) -> None:
        self._bytes -= sum(entry.size for _, entry in items)
        self._metrics.evicted(reason, len(items))
        self._metrics.held(*self.held)
