"""One LISTEN connection per API process, fanned out to every WatchJob stream of the changed job."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager

from shared.domain.errors import JobsError
from shared.domain.ids import JobId
from shared.storage.notifications import CHANGED_CHANNEL, LISTENING, listen

log = logging.getLogger(__name__)
RECONNECT_MAX_SECONDS = 10.0


class JobChangeHub:
    """Each stream holds one asyncio.Event, set when its job changes: a slow consumer costs a flag,
    never a growing queue."""

    def __init__(self, database_url: str | None) -> None:
        """`database_url` None: no session to LISTEN on (transaction pooling without a direct URL); then
        the hub never signals and streams rely on reading again."""
        self._database_url = database_url
        self._subscribers: dict[str, set[asyncio.Event]] = {}

    @contextmanager
    def subscribe(self, job_id: JobId) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._subscribers.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._subscribers.get(job_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._subscribers[job_id]

    @property
    def stream_count(self) -> int:
        return sum(len(events) for events in self._subscribers.values())

    async def run(self) -> None:
        """Listens until cancelled; after every (re)connect all streams re-read, since notifications
        sent while disconnected are lost."""
        if self._database_url is None:
            return
        delay = 0.5
        while True:
            try:
                async for channel, payload in listen(self._database_url, CHANGED_CHANNEL):
                    if (channel, payload) == LISTENING:
                        delay = 0.5
                        self._wake_all()
                    elif self._subscribers:  # most notifications arrive while no stream watches
                        for change in payload.split(","):
                            self._wake(change.partition(":")[0])
            except JobsError as exc:
                log.warning("job change listener lost its connection: %s", exc.message)
            self._wake_all()
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    def _wake(self, job_id: str) -> None:
        for event in self._subscribers.get(job_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._subscribers.values():
            for event in events:
                event.set()
