"""Reads for the queue gauges: one aggregate over open jobs, on a dedicated connection that may hold the
exporter lock. Returns plain rows; database errors leave as domain errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow, dict_row

from shared.domain.errors import DeadlineExceeded, Unavailable
from shared.domain.jobs import JobState
from shared.storage import queries
from shared.storage.connection_watchdog import ANSWER_GRACE_SECONDS, answered_within
from shared.storage.database import translate_db_errors, with_connection_defaults

# Session-level advisory lock held by the one API replica that exports the queue gauges; next to the
# migrations' lock key (7_310_001) in the project's own range.
METRICS_EXPORTER_LOCK_KEY = 7_310_002
# The aggregate reads partial indexes and takes milliseconds; far longer means something is wrong, and
# the next refresh should try again rather than pile up behind it.
QUERY_TIMEOUT_SECONDS = 5.0
# Server-side keepalives, so the lock of a replica whose host vanished is freed within about half a
# minute instead of the operating system's two hours.
_SESSION_OPTIONS = (
    f"-c statement_timeout={int(QUERY_TIMEOUT_SECONDS * 1000)} "
    "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
)


@dataclass(frozen=True)
class QueueRow:
    """Jobs of one tenant, kind and state. FAILED rows count only the recent window."""

    tenant: str
    kind: str
    state: JobState
    jobs: int
    # Age of the oldest runnable (pending or retry-wait, run_after passed) job; None when none is due.
    oldest_wait_seconds: float | None


@dataclass(frozen=True)
class LimitRow:
    """One key with an operator's limit or a hold: how many of its jobs run, how many runnable ones it
    holds back, and whether it has no room now (full, out of tokens, or held)."""

    key: str
    max_running: int
    running: int
    waiting: int
    saturated: bool


class ExporterSession:
    """One connection outside the pool. The exporter lock lives exactly as long as this connection,
    so a replica that dies or loses its database hands the role over without any cleanup."""

    def __init__(self, database_url: str, application_name: str = "jobs-api-metrics") -> None:
        self._database_url = database_url
        self._application_name = application_name
        self._conn: psycopg.AsyncConnection[DictRow] | None = None
        self._holds_lock = False
        self._acquisitions = 0

    @property
    def holds_lock(self) -> bool:
        return self._holds_lock

    @property
    def acquisitions(self) -> int:
        """How many times this session took the lock: a new value means a new term as exporter."""
        return self._acquisitions

    async def try_hold(self) -> bool:
        """Connects if needed and takes the lock if free; True while this session holds it."""
        if self._holds_lock and self._conn is not None and not self._conn.closed:
            return True
        async with self._closing_on_error():
            conn = await self._connection()
        async with self._closing_on_error():
            cur = await conn.execute(queries.METRICS_EXPORTER_LOCK_TRY, {"lock_key": METRICS_EXPORTER_LOCK_KEY})
            row = await cur.fetchone()
            self._holds_lock = bool(row and row["acquired"])
        if self._holds_lock:
            self._acquisitions += 1
        return self._holds_lock

    async def read_snapshot(self, *, failed_window_seconds: float) -> list[QueueRow]:
        """The aggregate, on the lock's own connection, with the proof that the lock is still held read in
        the same statement: the flag and `conn.closed` only say what this process last saw, and a session
        whose backend was terminated looks open until it is used. Without the proof the session is
        dropped and Unavailable raised, so no count is ever published on a lock that may be gone."""
        rows = await self._read_proven(queries.METRICS_QUEUE_SNAPSHOT, failed_window_seconds=failed_window_seconds)
        return [
            QueueRow(r["tenant"], r["kind"], JobState(r["state"]), r["jobs"], r["oldest_wait_seconds"])
            for r in rows
            if r["tenant"] is not None
        ]

    async def read_limits(self) -> list[LimitRow]:
        """Per limited or held key, with the same proof of the lock as read_snapshot."""
        rows = await self._read_proven(queries.METRICS_LIMIT_SNAPSHOT)
        return [
            LimitRow(r["key"], r["max_running"], r["running"], r["waiting"], r["saturated"])
            for r in rows
            if r["key"] is not None
        ]

    async def read_paused_kinds(self) -> list[str]:
        """The kinds an operator paused, with the same proof of the lock as read_snapshot."""
        rows = await self._read_proven(queries.METRICS_KIND_PAUSES)
        return [r["kind"] for r in rows if r["kind"] is not None]

    async def read_halted_sequences(self) -> dict[str, int]:
        """Per tenant, its sequences halted by a FAILED or OUTCOME_UNKNOWN job; with the lock's proof."""
        rows = await self._read_proven(queries.METRICS_SEQUENCES_HALTED)
        return {r["tenant"]: r["sequences"] for r in rows if r["tenant"] is not None}

    async def _read_proven(self, query: str, **params: object) -> list[DictRow]:
        """A statement whose first column, lock_held, proves the lock in the same snapshot."""
        if not self._holds_lock or self._conn is None:
            raise Unavailable("this session does not hold the exporter lock")
        async with self._closing_on_error():
            cur = await self._conn.execute(query, {**params, "lock_key": METRICS_EXPORTER_LOCK_KEY})
            rows = await cur.fetchall()
        if not rows or not rows[0]["lock_held"]:
            await self.close()
            raise Unavailable("the exporter lock is no longer held by this session")
        return rows

    @contextmanager
    def _answered(self) -> Iterator[None]:
        if self._conn is None or self._conn.closed:
            yield  # connecting, which connect_timeout bounds
            return
        with answered_within(self._conn, QUERY_TIMEOUT_SECONDS + ANSWER_GRACE_SECONDS):
            yield

    async def close(self) -> None:
        """Closes the connection, which releases the lock."""
        self._holds_lock = False
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _connection(self) -> psycopg.AsyncConnection[DictRow]:
        if self._conn is None or self._conn.closed:
            self._holds_lock = False
            self._conn = await psycopg.AsyncConnection.connect(
                with_connection_defaults(self._database_url),
                autocommit=True,
                row_factory=dict_row,
                application_name=self._application_name,
                options=_SESSION_OPTIONS,
            )
        return self._conn

    @asynccontextmanager
    async def _closing_on_error(self) -> AsyncIterator[None]:
        """Translates database errors. On any but a timed-out statement it also drops the connection, and
        with it the lock: a session in an unknown state must not go on exporting. A server that has not
        answered, even with its own cancellation, a while after the statement timeout has its connection
        given up: it would otherwise hold the refresher forever."""
        try:
            with translate_db_errors(), self._answered():
                yield
        except DeadlineExceeded:
            raise
        except BaseException:
            await self.close()
            raise
