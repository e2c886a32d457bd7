"""One LISTEN connection per API process, fanned out to every WatchJob stream of the changed job."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from shared.domain.errors import JobsError
from shared.domain.ids import JobId
from shared.pause import pause
from shared.storage.database import Database
from shared.storage.notifications import CHANGED_CHANNEL, LISTENING, listen, register_change_watcher

log = logging.getLogger(__name__)
RECONNECT_MAX_SECONDS = 10.0
# Statements notify jobs_changed only while some process's registration is live
# (0027_notify_changes_only_while_watched.sql): this one's lasts this long, renewed this often while
# streams are open. After a registration that had lapsed, every stream reads again this much later,
# for the changes whose statements ran before it committed.
REGISTRATION_SECONDS = 30.0
RENEW_SECONDS = 10.0
SETTLE_SECONDS = 1.0


class JobChangeHub:
    """Each stream holds one asyncio.Event, set when its job changes: a slow consumer costs a flag,
    never a growing queue."""

    def __init__(
        self,
        database_url: str | None,
        db: Database | None = None,
        *,
        registration_seconds: float = REGISTRATION_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        """`database_url` None: no session to LISTEN on (transaction pooling without a direct URL); then
        the hub never signals and streams rely on reading again. `db` None: the hub does not register
        (statements then notify only while another process's registration is live)."""
        self._database_url = database_url
        self._db = db
        self._subscribers: dict[str, set[asyncio.Event]] = {}
        self._listener = f"api-{uuid.uuid4()}"
        self._registration_seconds = registration_seconds
        self._renew_seconds = renew_seconds
        self._settle_seconds = settle_seconds
        # Monotonic, taken before the write: this process's row lasts at least registration_seconds from it.
        self._registered_at = float("-inf")  # never yet
        self._registering = asyncio.Lock()

    @asynccontextmanager
    async def subscribe(self, job_id: JobId) -> AsyncIterator[asyncio.Event]:
        """The stream's event, once this process's registration is committed: a stream that reads after
        this hears of every change committed later (or reads again SETTLE_SECONDS after a new one)."""
        event = asyncio.Event()
        self._subscribers.setdefault(job_id, set()).add(event)
        try:
            await self._ensure_registered()
            yield event
        finally:
            waiting = self._subscribers.get(job_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._subscribers[job_id]

    async def _ensure_registered(self) -> None:
        if self._database_url is None or self._db is None or not self._renewal_due():
            return
        async with self._registering:
            if not self._renewal_due():
                return
            asked_at = time.monotonic()
            lapsed = asked_at >= self._registered_at + self._registration_seconds
            try:
                async with self._db.transaction() as conn:
                    await register_change_watcher(conn, self._listener, self._registration_seconds)
            except JobsError as exc:
                # Streams still read again on their own timer; only the wake-ups are missing.
                log.warning("could not register for job change notifications: %s", exc.message)
                return
            self._registered_at = asked_at
        if lapsed:
            asyncio.get_running_loop().call_later(self._settle_seconds, self._wake_all)

    def _renewal_due(self) -> bool:
        return time.monotonic() >= self._registered_at + self._renew_seconds

    async def _keep_registered(self) -> None:
        while True:
            await pause(self._renew_seconds / 2)
            if self._subscribers:
                await self._ensure_registered()

    async def run(self) -> None:
        """Listens until cancelled; after every (re)connect all streams re-read, since notifications
        sent while disconnected are lost. Keeps this process registered while streams are open."""
        if self._database_url is None:
            return
        renewing = asyncio.create_task(self._keep_registered())
        try:
            await self._listen(self._database_url)
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)

    async def _listen(self, database_url: str) -> None:
        delay = 0.5
        while True:
            try:
                watch = self._db.watch if self._db is not None else None
                async for channel, payload in listen(database_url, CHANGED_CHANNEL, watch=watch):
                    if (channel, payload) == LISTENING:
                        delay = 0.5
                        self._wake_all()
                    elif self._subscribers:  # most notifications arrive while no stream watches
                        for change in payload.split(","):
                            self._wake(change.partition(":")[0])
            except JobsError as exc:
                log.warning("job change listener lost its connection: %s", exc.message)
            self._wake_all()
            await pause(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    def _wake(self, job_id: str) -> None:
        for event in self._subscribers.get(job_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._subscribers.values():
            for event in events:
                event.set()
