"""The result cache on a real event loop: shared loads, bounds, expiry, failures and fresh reads.

Loaders here are coroutines that count their calls and, where a test needs a load to stay in flight,
wait on an asyncio.Event the test sets: the interleavings are forced, never hoped for."""

from __future__ import annotations

import asyncio

import pytest

from api_service.metrics import ResultCacheMetrics
from api_service.result_cache import ResultCache, ResultCacheLimits
from shared.domain.errors import FailedPrecondition, ResourceExhausted, Unavailable

pytestmark = pytest.mark.timeout(10)

CONCURRENT_CALLERS = 50
TTL_SECONDS = 60.0


class Clock:
    """The cache's timer, moved by the test instead of by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingLoader:
    """Returns `value` (or raises the next of `failures`), optionally held until `release` is set."""

    def __init__(self, value: object = b"result", *, failures: list[Exception] | None = None, held: bool = False):
        self.value = value
        self.failures = list(failures or [])
        self.calls = 0
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        if not held:
            self.release.set()

    async def __call__(self) -> object:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        if self.failures:
            raise self.failures.pop(0)
        return self.value


def make_cache(clock: Clock | None = None, **limits) -> tuple[ResultCache, ResultCacheMetrics]:
    metrics = ResultCacheMetrics()
    limits.setdefault("ttl_seconds", TTL_SECONDS)
    return ResultCache(ResultCacheLimits(**limits), metrics, timer=clock or Clock()), metrics


def sample(metrics: ResultCacheMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def get(cache: ResultCache, key: str, loader: CountingLoader, size: int = 100):
    return cache.get(key, loader, size_of=lambda _: size, read="job_result")


async def test_concurrent_misses_of_one_key_share_one_load():
    cache, metrics = make_cache()
    loader = CountingLoader(b"summary")

    answers = await asyncio.gather(*(get(cache, "k", loader) for _ in range(CONCURRENT_CALLERS)))

    assert answers == [b"summary"] * CONCURRENT_CALLERS
    assert loader.calls == 1
    assert sample(metrics, "jobs_result_cache_lookups_total", read="job_result", outcome="miss") == 1
    assert sample(metrics, "jobs_result_cache_lookups_total", read="job_result", outcome="coalesced") == 49
    assert await get(cache, "k", loader) == b"summary" and loader.calls == 1
    assert sample(metrics, "jobs_result_cache_lookups_total", read="job_result", outcome="hit") == 1


async def test_an_entry_is_loaded_again_once_its_ttl_has_passed():
    clock = Clock()
    cache, metrics = make_cache(clock)
    loader = CountingLoader()
    await get(cache, "k", loader)

    clock.now += TTL_SECONDS - 1
    await get(cache, "k", loader)
    assert loader.calls == 1
    clock.now += 2
    await get(cache, "k", loader)

    assert loader.calls == 2
    await get(cache, "other", CountingLoader())  # a write drops what expired
    assert sample(metrics, "jobs_result_cache_evictions_total", reason="expired") >= 1


async def test_the_entry_bound_evicts_the_least_recently_used():
    cache, metrics = make_cache(max_entries=3)
    loaders = {key: CountingLoader(key) for key in "abcd"}
    for key in "abc":
        await get(cache, key, loaders[key])
    await get(cache, "a", loaders["a"])  # now b is the least recently used

    await get(cache, "d", loaders["d"])

    assert cache.held[0] == 3
    assert sample(metrics, "jobs_result_cache_evictions_total", reason="capacity") == 1
    for key in "acd":
        await get(cache, key, loaders[key])
        assert loaders[key].calls == 1
    await get(cache, "b", loaders["b"])
    assert loaders["b"].calls == 2


async def test_the_byte_bound_evicts_and_an_entry_larger_than_it_is_served_but_not_kept():
    cache, metrics = make_cache(max_bytes=1000)
    first, second, third = CountingLoader(1), CountingLoader(2), CountingLoader(3)
    await get(cache, "1", first, size=400)
    await get(cache, "2", second, size=400)
    await get(cache, "3", third, size=400)

    assert cache.held == (2, 800)
    assert sample(metrics, "jobs_result_cache_bytes") == 800
    assert sample(metrics, "jobs_result_cache_evictions_total", reason="capacity") == 1
    await get(cache, "1", first, size=400)
    assert first.calls == 2

    huge = CountingLoader("huge")
    assert await get(cache, "huge", huge, size=1001) == "huge"
    assert await get(cache, "huge", huge, size=1001) == "huge"
    assert huge.calls == 2
    assert cache.held[1] <= 1000


async def test_a_failed_load_reaches_its_callers_only_and_is_not_kept():
    cache, metrics = make_cache()
    loader = CountingLoader(b"ok", failures=[Unavailable("the database is unavailable")], held=True)
    waiting = [asyncio.ensure_future(get(cache, "k", loader)) for _ in range(10)]
    await loader.started.wait()
    loader.release.set()

    outcomes = await asyncio.gather(*waiting, return_exceptions=True)

    assert all(isinstance(outcome, Unavailable) for outcome in outcomes)
    assert loader.calls == 1
    assert cache.held == (0, 0)
    assert await get(cache, "k", loader) == b"ok"
    assert loader.calls == 2
    assert await get(cache, "k", loader) == b"ok" and loader.calls == 2


async def test_a_caller_that_goes_away_does_not_cancel_the_load_for_the_others():
    cache, _ = make_cache()
    loader = CountingLoader(b"ok", held=True)
    leaving = asyncio.ensure_future(get(cache, "k", loader))
    staying = asyncio.ensure_future(get(cache, "k", loader))
    await loader.started.wait()

    leaving.cancel()
    loader.release.set()

    assert await staying == b"ok"
    assert leaving.cancelled()
    assert await get(cache, "k", loader) == b"ok" and loader.calls == 1


async def test_too_many_distinct_loads_are_refused_and_the_key_in_flight_still_joins():
    cache, metrics = make_cache(max_loads_in_flight=2)
    slow = {key: CountingLoader(key, held=True) for key in "ab"}
    in_flight = [asyncio.ensure_future(get(cache, key, slow[key])) for key in "ab"]
    await asyncio.gather(*(loader.started.wait() for loader in slow.values()))

    with pytest.raises(ResourceExhausted) as refused:
        await get(cache, "c", CountingLoader())
    follower = asyncio.ensure_future(get(cache, "a", slow["a"]))
    for loader in slow.values():
        loader.release.set()

    assert await asyncio.gather(*in_flight, follower) == ["a", "b", "a"]
    assert refused.value.retry_after_seconds > 0
    assert sample(metrics, "jobs_result_cache_lookups_total", read="job_result", outcome="rejected") == 1
    assert await get(cache, "c", CountingLoader("c")) == "c"


async def test_a_not_ready_answer_from_a_read_begun_earlier_is_read_again_by_the_later_caller():
    cache, metrics = make_cache()
    loader = CountingLoader(b"result", failures=[FailedPrecondition("not ready", reason="RESULT_NOT_READY")], held=True)
    early = asyncio.ensure_future(get(cache, "k", loader))
    await loader.started.wait()
    # The result is stored now, after the early read began and before the late caller arrives.
    late = asyncio.ensure_future(get(cache, "k", loader))
    await asyncio.sleep(0)  # one turn of the loop: the late caller has joined the read in flight
    assert sample(metrics, "jobs_result_cache_lookups_total", read="job_result", outcome="coalesced") == 1
    loader.release.set()

    with pytest.raises(FailedPrecondition):
        await early
    assert await late == b"result"
    assert loader.calls == 2


async def test_a_fresh_read_is_never_shared_with_a_caller_that_arrived_after_it_began():
    cache, metrics = make_cache()
    head = {"version": 1}
    began = asyncio.Event()
    gate = asyncio.Event()
    calls = 0

    async def read_head() -> int:
        nonlocal calls
        calls += 1
        seen = head["version"]  # the read's snapshot is taken when it begins
        began.set()
        await gate.wait()
        return seen

    first = asyncio.ensure_future(cache.read_fresh("head", read_head, read="resource_head"))
    await began.wait()
    head["version"] = 2  # committed while the first read is in flight
    later = [asyncio.ensure_future(cache.read_fresh("head", read_head, read="resource_head")) for _ in range(5)]
    await asyncio.sleep(0)  # one turn of the loop: each later caller has joined (asserted below)
    assert sample(metrics, "jobs_result_cache_lookups_total", read="resource_head", outcome="coalesced") == 4
    gate.set()

    assert await first == 1
    assert await asyncio.gather(*later) == [2] * 5
    assert calls == 2
    assert sample(metrics, "jobs_result_cache_loads_total", read="resource_head") == 2
    assert cache.held == (0, 0)


async def test_with_zero_entries_nothing_is_kept_but_concurrent_reads_are_still_shared():
    cache, _ = make_cache(max_entries=0)
    loader = CountingLoader()

    await asyncio.gather(*(get(cache, "k", loader) for _ in range(CONCURRENT_CALLERS)))
    await get(cache, "k", loader)

    assert loader.calls == 2
    assert cache.held == (0, 0)
