"""Connection pool and transactions; the one boundary where database errors become domain errors."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from shared.domain.errors import (
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    RowsRejected,
    Unavailable,
)
from shared.storage import queries
from shared.storage.database_settings import PREPARE_THRESHOLD_DEFAULT

Connection = psycopg.AsyncConnection[DictRow]

# libpq settings every connection gets unless its URL sets them: keepalives notice an idle connection to a
# host that vanished (a lost machine sends no reset) within about half a minute, and tcp_user_timeout does
# the same for a request the host never acknowledged, instead of the kernel's retransmissions for minutes.
CONNECTION_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
# How long the pool retries one lost connection in the background, its waits doubling from 1 s, before it
# gives up and lets the next request start a fresh attempt. psycopg's default (300 s) lets the waits grow
# through an outage: after 20 s down, a pool served again 8.3 s after the server was back, against 0.8 s
# with this; after a failover that is the time from the promotion to the first transaction served.
RECONNECT_TIMEOUT_SECONDS_DEFAULT = 5.0

# Monotonic time by which the current call's caller stops waiting; None when it set no deadline.
_call_deadline: ContextVar[float | None] = ContextVar("jobs_call_deadline", default=None)


@dataclass(frozen=True)
class PoolSettings:
    url: str
    min_size: int = 1
    max_size: int = 10
    # How long a caller waits for a free connection before the request fails fast.
    acquire_timeout_seconds: float = 5.0
    application_name: str = "jobs"
    # None turns psycopg's server-side prepared statements off, as a transaction pooler needs.
    prepare_threshold: int | None = PREPARE_THRESHOLD_DEFAULT
    reconnect_timeout_seconds: float = RECONNECT_TIMEOUT_SECONDS_DEFAULT


def with_connection_defaults(url: str) -> str:
    """The URL as a libpq connection string, with CONNECTION_DEFAULTS for what it leaves unset."""
    given = conninfo_to_dict(url)
    return make_conninfo(url, **{k: v for k, v in CONNECTION_DEFAULTS.items() if k not in given})


@contextmanager
def translate_db_errors() -> Iterator[None]:
    """Maps psycopg errors to the domain tree; anything else passes through unchanged."""
    try:
        yield
    except PoolTimeout as exc:
        # Either every connection is busy or none can be made (the database is down): both transient.
        raise Unavailable("no database connection became available in time") from exc
    except psycopg.errors.QueryCanceled as exc:
        raise DeadlineExceeded("the database did not answer in time") from exc
    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
        raise Unavailable("a conflicting update won; try again") from exc
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        # A server that stopped taking writes (being demoted, or fenced by an operator): nothing was written.
        raise Unavailable("the database does not accept writes right now") from exc
    except psycopg.DataError as exc:
        raise InvalidArgument(FieldViolation("request", "a value is out of range")) from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        # Includes a lost COMMIT reply: the outcome is unknown, so the answer must be indeterminate.
        raise Unavailable("the database is unavailable") from exc


@asynccontextmanager
async def savepoint(conn: Connection) -> AsyncIterator[None]:
    """A transaction nested in the current one: when the block fails, only its own work is undone and the
    enclosing transaction goes on. A statement refused for the rows it touched raises RowsRejected; a
    failure of the session itself (a lost connection, a timeout) raises as `translate_db_errors` says."""
    with translate_db_errors():
        try:
            async with conn.transaction():
                yield
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except psycopg.DatabaseError as exc:
            raise RowsRejected(exc.diag.message_primary or type(exc).__name__) from exc


@contextmanager
def call_deadline(seconds_remaining: float | None) -> Iterator[None]:
    """Bounds every transaction begun inside the block by the caller's remaining time: waiting for a
    connection, and each statement (statement_timeout), so an abandoned call frees its connection."""
    token = _call_deadline.set(None if seconds_remaining is None else time.monotonic() + seconds_remaining)
    try:
        yield
    finally:
        _call_deadline.reset(token)


def _seconds_left() -> float | None:
    deadline = _call_deadline.get()
    return None if deadline is None else deadline - time.monotonic()


async def set_tenant(conn: Connection, tenant: str) -> None:
    """Confines the rest of the current transaction to one tenant's rows (row-level security, for the
    jobs_api role); call it again to switch tenants mid-transaction."""
    await conn.execute(queries.SESSION_SCOPE_TENANT, {"tenant": tenant})


async def _begin(conn: Connection, tenant: str | None, seconds_left: float | None) -> None:
    """Starts the transaction. One with settings (a tenant, a deadline) sends its BEGIN and its settings in
    one round trip: psycopg would wait for the answer to its own BEGIN before sending the settings, a
    round trip of its own for every call (a worker's CompleteJobs: BEGIN, the deadline, the completion,
    COMMIT). One without leaves BEGIN to psycopg, which sends it before the first statement. Either way
    the pool commits or rolls back the transaction when it takes the connection back."""
    scope: str
    params: dict[str, str]
    if seconds_left is None:
        if tenant is None:
            await conn.set_autocommit(False)
            return
        scope, params = queries.SESSION_SCOPE_TENANT, {"tenant": tenant}
    else:
        timeout_ms = str(max(1, int(seconds_left * 1000)))
        if tenant is None:
            scope, params = queries.SESSION_SCOPE_TIMEOUT, {"timeout_ms": timeout_ms}
        else:
            scope, params = queries.SESSION_SCOPE_TENANT_AND_TIMEOUT, {"tenant": tenant, "timeout_ms": timeout_ms}
    # In autocommit mode psycopg sends no BEGIN of its own: ours goes in the pipeline with the settings.
    await conn.set_autocommit(True)
    async with conn.pipeline():
        await conn.execute(queries.SESSION_BEGIN)
        await conn.execute(scope, params)


class Database:
    """An async pool whose transactions raise domain errors only."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        acquire_timeout_seconds: float = 5.0,
        probe: DatabaseProbe | None = None,
    ) -> None:
        self._pool = pool
        self._acquire_timeout = acquire_timeout_seconds
        self._probe = probe

    @classmethod
    async def open(cls, settings: PoolSettings, *, wait: bool = False) -> Database:
        """Opens the pool; without `wait` it connects in the background, so a down database
        does not stop the process from starting (health reports NOT_SERVING instead)."""
        url = with_connection_defaults(settings.url)
        pool = AsyncConnectionPool(
            url,
            connection_class=Connection,
            min_size=settings.min_size,
            max_size=settings.max_size,
            timeout=settings.acquire_timeout_seconds,
            reconnect_timeout=settings.reconnect_timeout_seconds,
            kwargs={
                "row_factory": dict_row,
                "application_name": settings.application_name,
                "prepare_threshold": settings.prepare_threshold,
            },
            open=False,
        )
        await pool.open(wait=wait)
        probe = DatabaseProbe(url, f"{settings.application_name}-probe", settings.prepare_threshold)
        return cls(pool, settings.acquire_timeout_seconds, probe)

    @asynccontextmanager
    async def transaction(self, tenant: str | None = None) -> AsyncIterator[Connection]:
        """One transaction: committed when the block ends normally, rolled back otherwise. With a
        tenant, it sees and writes only that tenant's rows; inside `call_deadline`, it ends by then."""
        seconds_left = _seconds_left()
        with translate_db_errors():
            if seconds_left is not None and seconds_left <= 0:
                raise DeadlineExceeded("the caller's deadline passed")
            wait = self._acquire_timeout if seconds_left is None else min(self._acquire_timeout, seconds_left)
            async with self._pool.connection(timeout=wait) as conn:
                try:
                    await _begin(conn, tenant, seconds_left)
                    yield conn
                except psycopg.errors.ReadOnlySqlTransaction:
                    # The pool would keep a connection to a server that no longer takes writes, and
                    # every write through it would fail; closed, it is replaced by one that
                    # target_session_attrs=read-write sends to the current primary.
                    await conn.close()
                    raise

    async def ping(self, timeout_seconds: float = 2.0) -> bool:
        """Whether the database answers and takes writes, over a connection of its own: a pool whose
        connections are all busy is not a database that is down."""
        if self._probe is not None:
            return await self._probe.ping(timeout_seconds)
        try:
            async with self._pool.connection(timeout=timeout_seconds) as conn:
                row = await (await conn.execute(queries.SESSION_PING)).fetchone()
            return bool(row and row["writable"])
        except (psycopg.Error, PoolTimeout, OSError):
            return False

    def stats(self) -> dict[str, int]:
        return self._pool.get_stats()

    async def close(self) -> None:
        if self._probe is not None:
            await self._probe.close()
        await self._pool.close()


class DatabaseProbe:
    """One dedicated connection for health checks, reopened after any failure."""

    def __init__(
        self, url: str, application_name: str, prepare_threshold: int | None = PREPARE_THRESHOLD_DEFAULT
    ) -> None:
        self._url = url
        self._application_name = application_name
        self._prepare_threshold = prepare_threshold
        self._conn: psycopg.AsyncConnection | None = None

    async def ping(self, timeout_seconds: float) -> bool:
        try:
            async with asyncio.timeout(timeout_seconds):
                if self._conn is None or self._conn.closed:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self._url,
                        autocommit=True,
                        application_name=self._application_name,
                        prepare_threshold=self._prepare_threshold,
                    )
                row = await (await self._conn.execute(queries.SESSION_PING)).fetchone()
            writable = bool(row and row[0])
        except (psycopg.Error, OSError, TimeoutError):
            writable = False
        if not writable:
            # Reconnect next time: a multi-host URL then finds the server that takes writes now.
            await self.close()
        return writable

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
