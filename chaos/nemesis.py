"""The faults of a chaos run. Each kind of fault strikes on its own clock (exponentially spaced, a mean
of `fault_interval_seconds` apart) and independently of the others, so several are often in force at
once: a worker paused past its lease while PostgreSQL restarts and the relay delays every packet.

Every fault is recorded when it strikes (`phase` "start", or "instant" for one that is over at once)
and, for those that last, when it ends; the checker reads the pauses back, since a paused worker
cannot be asked to notice anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from chaos.cluster import Cluster, ServiceProcess
from chaos.config import ChaosConfig, FaultKind
from chaos.history import HistoryWriter

# Seconds a short pause lasts, as fractions of the lease: always shorter than it.
WORKER_PAUSE_LEASES = (0.1, 0.8)
# A lease pause outlasts the lease, so the worker's own clock finds every deadline passed on waking.
LEASE_PAUSE_LEASES = (1.1, 1.6)
API_PAUSE_SECONDS = (0.2, 1.5)
# How long PostgreSQL stays down before it is started again (its crash recovery comes on top).
POSTGRES_DOWN_SECONDS = (0.0, 0.5)
DELAY_PER_CHUNK_SECONDS = (0.05, 0.5)
DELAY_SECONDS = (0.5, 3.0)
CANDIDATE_POLL_SECONDS = 0.1
# Kinds whose faults may be in force several at once.
OVERLAPPING = frozenset(
    {FaultKind.WORKER_PAUSE, FaultKind.LEASE_PAUSE, FaultKind.API_PAUSE, FaultKind.CONNECTIONS_DELAYED}
)


class Nemesis:
    def __init__(self, cluster: Cluster, config: ChaosConfig, history: HistoryWriter) -> None:
        self._cluster = cluster
        self._config = config
        self._history = history
        self._ids = itertools.count(1)
        self.counts: Counter[str] = Counter()
        self._actions: dict[FaultKind, Callable[[random.Random, int], Awaitable[bool]]] = {
            FaultKind.WORKER_KILL: lambda rng, fid: self._kill(rng, fid, FaultKind.WORKER_KILL, cluster.workers),
            FaultKind.API_KILL: lambda rng, fid: self._kill(rng, fid, FaultKind.API_KILL, cluster.apis),
            FaultKind.WORKER_PAUSE: lambda rng, fid: self._pause(
                rng, fid, FaultKind.WORKER_PAUSE, cluster.workers, _scaled(WORKER_PAUSE_LEASES, config.lease_seconds)
            ),
            FaultKind.LEASE_PAUSE: lambda rng, fid: self._pause(
                rng, fid, FaultKind.LEASE_PAUSE, cluster.workers, _scaled(LEASE_PAUSE_LEASES, config.lease_seconds)
            ),
            FaultKind.API_PAUSE: lambda rng, fid: self._pause(
                rng, fid, FaultKind.API_PAUSE, cluster.apis, API_PAUSE_SECONDS
            ),
            FaultKind.POSTGRES_CRASH: self._crash_postgres,
            FaultKind.CONNECTIONS_CUT: self._cut,
            FaultKind.CONNECTIONS_DELAYED: self._delay,
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Strikes until `stop`, then waits for the faults in force to end (nothing is left paused or down)."""
        await asyncio.gather(*(self._strike(kind, stop) for kind in sorted(self._config.faults)))

    async def _strike(self, kind: FaultKind, stop: asyncio.Event) -> None:
        """Strike times are a Poisson process of their own: each is drawn from the one before it was due,
        not from when it ended, so a fault that lasts does not slow its kind's pace. Faults that can be in
        force several at once (pauses of different processes, delays) overlap; a PostgreSQL crash waits
        for the one before it to be over."""
        schedule = random.Random(f"{self._config.seed}-{kind.value}")
        action = self._actions[kind]
        in_force: set[asyncio.Task[None]] = set()
        due = time.monotonic()
        for number in itertools.count(1):
            due += schedule.expovariate(1.0 / self._config.fault_interval_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
            if stop.is_set():
                break
            # Each strike's choices come from a generator of its own, so timing never shifts another's.
            rng = random.Random(f"{self._config.seed}-{kind.value}-{number}")
            strike = self._counted(kind, action(rng, next(self._ids)))
            if kind in OVERLAPPING:
                task = asyncio.create_task(strike)
                in_force.add(task)
                task.add_done_callback(in_force.discard)
            else:
                await strike
        if in_force:
            await asyncio.gather(*in_force)

    async def _counted(self, kind: FaultKind, strike: Awaitable[bool]) -> None:
        if await strike:
            self.counts[kind.value] += 1

    def _record(self, fault_id: int, kind: FaultKind, phase: str, **fields: object) -> None:
        self._history.record("fault", id=fault_id, kind=kind.value, phase=phase, **fields)

    async def _kill(self, rng: random.Random, fault_id: int, kind: FaultKind, among: list[ServiceProcess]) -> bool:
        process = rng.choice(among)
        pid = process.popen.pid if process.popen else None
        if not process.kill():
            return False
        self._record(fault_id, kind, "instant", target=process.name, pid=pid)
        # Started again at once, as a supervisor would; the new incarnation takes its time to serve.
        process.start()
        return True

    async def _pause(
        self,
        rng: random.Random,
        fault_id: int,
        kind: FaultKind,
        among: list[ServiceProcess],
        seconds: tuple[float, float],
    ) -> bool:
        process = await self._unpaused(rng, among)
        if process is None:
            return False
        duration = rng.uniform(*seconds)
        if not process.pause():
            return False
        self._record(fault_id, kind, "start", target=process.name, seconds=round(duration, 3))
        await asyncio.sleep(duration)
        # A process killed while paused is already running again, unpaused, under a new pid.
        if process.paused:
            process.resume()
        self._record(fault_id, kind, "end", target=process.name)
        return True

    async def _unpaused(self, rng: random.Random, among: list[ServiceProcess]) -> ServiceProcess | None:
        """A running process not paused already, waiting for one (up to a fault interval) while the others
        are: a pause that found none free would otherwise be lost to its kind's count."""
        deadline = time.monotonic() + self._config.fault_interval_seconds
        while True:
            candidates = [p for p in among if p.running() and not p.paused]
            if candidates:
                return rng.choice(candidates)
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(CANDIDATE_POLL_SECONDS)

    async def _crash_postgres(self, rng: random.Random, fault_id: int) -> bool:
        await asyncio.to_thread(self._cluster.crash_postgres)
        self._record(fault_id, FaultKind.POSTGRES_CRASH, "start", target="postgres")
        await asyncio.sleep(rng.uniform(*POSTGRES_DOWN_SECONDS))
        await asyncio.to_thread(self._cluster.start_postgres)
        self._record(fault_id, FaultKind.POSTGRES_CRASH, "end", target="postgres")
        return True

    async def _cut(self, rng: random.Random, fault_id: int) -> bool:
        cut = await self._cluster.proxy.cut()
        self._record(fault_id, FaultKind.CONNECTIONS_CUT, "instant", target="proxy", connections=cut)
        return True

    async def _delay(self, rng: random.Random, fault_id: int) -> bool:
        per_chunk, duration = rng.uniform(*DELAY_PER_CHUNK_SECONDS), rng.uniform(*DELAY_SECONDS)
        self._cluster.proxy.delay(per_chunk, duration)
        self._record(fault_id, FaultKind.CONNECTIONS_DELAYED, "start", target="proxy", per_chunk=round(per_chunk, 3))
        await asyncio.sleep(duration)
        self._record(fault_id, FaultKind.CONNECTIONS_DELAYED, "end", target="proxy")
        return True


def _scaled(fractions: tuple[float, float], lease_seconds: float) -> tuple[float, float]:
    return (fractions[0] * lease_seconds, fractions[1] * lease_seconds)
