"""The job kinds the API accepts and the policy it applies to each, as the workers published them.

The API imports no user code. It reads the published kinds from the database and keeps them for at
most `max_staleness_seconds`. A kind it has not seen is looked up again before the submission is
refused, so a worker's new kind is accepted as soon as it is published; such lookups run at most once per
`miss_refresh_seconds` (a flood of unknown kinds waits for the next one rather than querying each time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from shared.domain.kinds import KindPolicy
from shared.storage import kind_store
from shared.storage.database import Database

MAX_STALENESS_SECONDS_DEFAULT = 5.0
MISS_REFRESH_SECONDS_DEFAULT = 0.5


class KindCatalog:
    def __init__(
        self,
        db: Database,
        *,
        max_staleness_seconds: float = MAX_STALENESS_SECONDS_DEFAULT,
        miss_refresh_seconds: float = MISS_REFRESH_SECONDS_DEFAULT,
    ) -> None:
        self._db = db
        self._max_staleness = max_staleness_seconds
        self._miss_refresh = miss_refresh_seconds
        self._known: Mapping[str, KindPolicy] = {}
        self._loaded_at = float("-inf")
        self._lock = asyncio.Lock()

    async def known(self, *kinds: str) -> Mapping[str, KindPolicy]:
        """The kinds in force: fresh within the staleness bound, and looked up again when one of
        `kinds` is missing (a newly published kind)."""
        asked_at = time.monotonic()
        age = asked_at - self._loaded_at
        missing = any(kind not in self._known for kind in kinds)
        if missing and age <= self._miss_refresh:
            # A refusal read from a list loaded before the kind's publication would be wrong: wait for
            # the next lookup instead.
            await asyncio.sleep(self._miss_refresh - age)
        if missing or age > self._max_staleness:
            await self._reload(asked_at)
        return self._known

    def policy(self, kind: str) -> KindPolicy:
        """The policy of a kind that `known` admitted moments ago; a kind retired in between keeps the
        defaults rather than failing a submission that was already validated."""
        return self._known.get(kind) or KindPolicy(kind)

    async def _reload(self, asked_at: float) -> None:
        async with self._lock:
            if self._loaded_at >= asked_at:
                return  # another caller's lookup started after this one asked: its answer will do
            started = time.monotonic()
            async with self._db.transaction() as conn:
                known = await kind_store.list_known(conn)
            self._known, self._loaded_at = known, started
