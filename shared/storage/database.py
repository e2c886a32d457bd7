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
from psycopg.abc import Params
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import ExecStatus
from psycopg.rows import AsyncRowFactory, DictRow, Row, TupleRow, dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from shared.context_reset import reset_where_set
from shared.domain.errors import (
    DatabaseUnreachable,
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    RowsRejected,
    Unavailable,
)
from shared.storage import queries
from shared.storage.connection_watchdog import (
    ANSWER_GRACE_SECONDS,
    AnswerBound,
    SilenceWatch,
    answered_within,
    server_of,
)
from shared.storage.database_settings import PREPARE_THRESHOLD_DEFAULT
from shared.storage.fault_injection import StatementFaults, pool_connection_kwargs

Connection = psycopg.AsyncConnection[DictRow]
TUPLES_OK = ExecStatus.TUPLES_OK

# libpq settings every connection gets unless its URL sets them. A server that does not complete a
# connection within connect_timeout is passed over for the next host of the URL (a hung server's kernel still
# accepts the TCP connection; only the server's answer never comes). Keepalives notice an idle connection to a
# host that vanished (a lost machine sends no reset) within about 11 s, and tcp_user_timeout gives up on data
# the host never acknowledged after 10 s instead of the kernel's retransmissions for minutes. None of these
# notices a server that hangs while its kernel runs on: connection_watchdog does.
CONNECTION_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
# How long the pool retries one lost connection in the background, its waits doubling from 1 s, before it
# gives up and lets the next request start a fresh attempt. psycopg's default (300 s) lets the waits grow
# through an outage: after 20 s down, a pool served again 8.3 s after the server was back, against 0.8 s
# with this; after a failover that is the time from the promotion to the first transaction served.
RECONNECT_TIMEOUT_SECONDS_DEFAULT = 5.0
# The bound of a transaction begun outside any caller's deadline (a background loop's, a shared flush's):
# nothing waits on the database without one.
TRANSACTION_SECONDS_DEFAULT = 30.0

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
    # How long a transaction may take when no caller's deadline bounds it.
    transaction_seconds: float = TRANSACTION_SECONDS_DEFAULT
    # JOBS_FAULT_INJECTION: the fraction of statements that fail on purpose (fault_injection.py); 0 is off.
    fault_injection: float = 0.0


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
        raise DatabaseUnreachable("no database connection became available in time") from exc
    except psycopg.errors.QueryCanceled as exc:
        raise DeadlineExceeded("the database did not answer in time") from exc
    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
        raise Unavailable("a conflicting update won; try again") from exc
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        # A server that stopped taking writes (being demoted, or fenced by an operator): nothing was written.
        raise DatabaseUnreachable("the database does not accept writes right now") from exc
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
    with call_deadline_at(None if seconds_remaining is None else time.monotonic() + seconds_remaining):
        yield


@contextmanager
def call_deadline_at(deadline: float | None) -> Iterator[None]:
    """`call_deadline` given as the monotonic time by which the caller stops waiting (None: no bound)."""
    token = _call_deadline.set(deadline)
    try:
        yield
    finally:
        reset_where_set(_call_deadline, token)


def current_call_deadline() -> float | None:
    """The monotonic time by which the current caller stops waiting, if it said."""
    return _call_deadline.get()


async def set_tenant(conn: Connection, tenant: str) -> None:
    """Confines the rest of the current transaction to one tenant's rows (row-level security, for the
    jobs_api role); call it again to switch tenants mid-transaction."""
    await conn.execute(queries.SESSION_SCOPE_TENANT, {"tenant": tenant})


async def _begin(conn: Connection, tenant: str | None, seconds_left: float) -> None:
    """BEGIN with the transaction's bounds, and its tenant when it has one, in one round trip. psycopg
    would send its own BEGIN first and wait for the answer, a round trip more in every transaction (a
    worker's claim: BEGIN, the bounds, the claim, COMMIT); on the pool's connections, in autocommit mode,
    it sends none, and ours goes in one pipeline with the settings. The transaction ends as psycopg's
    would: committed or rolled back when the connection's block ends."""
    # Plain cursors, not the connection's own: with JOBS_FAULT_INJECTION on, those fail a fraction of the
    # statements they run, and that fraction is meant of the transaction's work. Counting BEGIN and the
    # bounds too would triple the faults of a one-statement transaction (a claim, a heartbeat), and with
    # them the leases lost to claims whose reply never came (docs/CHAOS.md).
    async with conn.pipeline():
        await psycopg.AsyncCursor(conn).execute(queries.SESSION_BEGIN)
        await _scope(conn, tenant, seconds_left)


async def _scope(conn: Connection, tenant: str | None, seconds_left: float) -> None:
    """The current transaction's bounds (each statement's, and each pause's), and its tenant if given;
    sent through a plain cursor, never failed on purpose (see `_begin`)."""
    timeout_ms = str(max(1, int(seconds_left * 1000)))
    if tenant is None:
        await psycopg.AsyncCursor(conn).execute(queries.SESSION_SCOPE_TIMEOUT, {"timeout_ms": timeout_ms})
    else:
        await psycopg.AsyncCursor(conn).execute(
            queries.SESSION_SCOPE_TENANT_AND_TIMEOUT, {"tenant": tenant, "timeout_ms": timeout_ms}
        )


class Database:
    """An async pool whose transactions raise domain errors only, each bounded in time: by its caller's
    deadline, else by the pool's own; a connection that does not answer in time is given up and replaced."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        watch: SilenceWatch,
        *,
        acquire_timeout_seconds: float = 5.0,
        transaction_seconds: float = TRANSACTION_SECONDS_DEFAULT,
        probe: DatabaseProbe | None = None,
        faults: StatementFaults | None = None,
    ) -> None:
        self._pool = pool
        self._watch = watch
        self._acquire_timeout = acquire_timeout_seconds
        self._transaction_seconds = transaction_seconds
        self._probe = probe
        self._faults = faults

    @classmethod
    async def open(cls, settings: PoolSettings, *, wait: bool = False) -> Database:
        """Opens the pool; without `wait` it connects in the background, so a down database
        does not stop the process from starting (health reports NOT_SERVING instead)."""
        url = with_connection_defaults(settings.url)
        faults = StatementFaults.from_fraction(settings.fault_injection)
        pool: AsyncConnectionPool[Connection]

        async def drain() -> None:
            # Idle connections to a server found silent would each fail their next transaction.
            await pool.drain()

        watch = SilenceWatch(url, settings.application_name, on_silence=drain)
        pool = AsyncConnectionPool(
            lambda: watch.conninfo(url),
            connection_class=Connection,
            min_size=settings.min_size,
            max_size=settings.max_size,
            timeout=settings.acquire_timeout_seconds,
            reconnect_timeout=settings.reconnect_timeout_seconds,
            kwargs={
                "row_factory": dict_row,
                # Database.transaction begins each transaction itself (_begin).
                "autocommit": True,
                "application_name": settings.application_name,
                "prepare_threshold": settings.prepare_threshold,
                **pool_connection_kwargs(faults),
            },
            configure=watch.configure,
            open=False,
        )
        await pool.open(wait=wait)
        probe = DatabaseProbe(url, f"{settings.application_name}-probe", settings.prepare_threshold, watch=watch)
        return cls(
            pool,
            watch,
            acquire_timeout_seconds=settings.acquire_timeout_seconds,
            transaction_seconds=settings.transaction_seconds,
            probe=probe,
            faults=faults,
        )

    @property
    def watch(self) -> SilenceWatch:
        """What this database's dedicated sessions (LISTEN, gauges) report silent servers to."""
        return self._watch

    @asynccontextmanager
    async def transaction(self, tenant: str | None = None) -> AsyncIterator[Connection]:
        """One transaction: committed when the block ends normally, rolled back otherwise. With a
        tenant, it sees and writes only that tenant's rows. It ends by the caller's deadline
        (`call_deadline`), or within the pool's transaction bound when none was set."""
        async with self._bounded_connection() as (conn, deadline), conn:
            try:
                await _begin(conn, tenant, deadline - time.monotonic())
                yield conn
            except psycopg.errors.ReadOnlySqlTransaction:
                # The pool would keep a connection to a server that no longer takes writes, and
                # every write through it would fail; closed, it is replaced by one that
                # target_session_attrs=read-write sends to the current primary.
                await conn.close()
                raise

    async def run_alone(self, query: str, params: Params, tenant: str | None = None) -> list[DictRow]:
        """One statement in a transaction of its own, its rows returned once it committed: the bounds,
        the statement and its COMMIT in one round trip, where `transaction` takes three (BEGIN with the
        bounds, the statement, COMMIT). Bounded as every transaction is (the caller's deadline, else the
        pool's; the watchdog), and failing as one does: nothing written unless the answer is OK or
        indeterminate. For a statement that needs nothing else in its transaction."""
        return await self.run_alone_as(dict_row, query, params, tenant)

    async def run_alone_tuples(self, query: str, params: Params, tenant: str | None = None) -> list[TupleRow]:
        """As run_alone, the rows as tuples in the statement's column order: cheaper by the row."""
        return await self.run_alone_as(tuple_row, query, params, tenant)

    async def run_alone_as(
        self, rows: AsyncRowFactory[Row], query: str, params: Params, tenant: str | None = None, *, binary: bool = False
    ) -> list[Row]:
        """`run_alone` with each row made by `rows`, and sent in the binary format when asked: a hot
        statement's many rows decoded straight into their objects, with no dict per row on the way."""
        async with self._bounded_connection() as (conn, deadline):
            try:
                # The statements of one pipeline up to its sync run in one implicit transaction, so the
                # bounds hold for the statement and end with it, as a transaction's local settings do.
                async with conn.pipeline():
                    await _scope(conn, tenant, deadline - time.monotonic())
                    cur = await conn.cursor(binary=binary, row_factory=rows).execute(query, params)
            except psycopg.errors.ReadOnlySqlTransaction:
                await conn.close()  # as in `transaction`
                raise
            # A statement that returns no rows (a plain INSERT) has none to fetch. Its status says so
            # without the description, which is an object per column made anew at each reading.
            result = cur.pgresult
            return await cur.fetchall() if result is not None and result.status == TUPLES_OK else []

    @asynccontextmanager
    async def _bounded_connection(self) -> AsyncIterator[tuple[Connection, float]]:
        """A pool connection for one transaction, with the deadline that bounds it: the caller's, else the
        pool's own. A connection that does not answer by then (the COMMIT too: a silent server would hold
        it forever) is given up, and never handed out again."""
        deadline = current_call_deadline()
        if deadline is None:
            deadline = time.monotonic() + self._transaction_seconds
        injected = self._faults.transaction() if self._faults is not None else contextlib.nullcontext()
        with translate_db_errors(), injected:
            seconds_left = deadline - time.monotonic()
            if seconds_left <= 0:
                raise DeadlineExceeded("the caller's deadline passed")
            conn = await self._pool.getconn(timeout=min(self._acquire_timeout, seconds_left))
            bound: AnswerBound | None = None
            try:
                with self._watch.using(conn, deadline - time.monotonic() + ANSWER_GRACE_SECONDS) as bound:
                    yield conn, deadline
            finally:
                if bound is not None and bound.given_up is not None:
                    # Its socket is shut, whatever libpq last saw: the pool must not hand it out again.
                    await conn.close()
                await self._pool.putconn(conn)

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
        await self._watch.close()
        await self._pool.close()


class DatabaseProbe:
    """One dedicated connection for health checks, reopened after any failure."""

    def __init__(
        self,
        url: str,
        application_name: str,
        prepare_threshold: int | None = PREPARE_THRESHOLD_DEFAULT,
        *,
        watch: SilenceWatch | None = None,
    ) -> None:
        self._url = url
        self._application_name = application_name
        self._prepare_threshold = prepare_threshold
        self._watch = watch
        self._conn: psycopg.AsyncConnection | None = None

    async def ping(self, timeout_seconds: float) -> bool:
        """Answers within `timeout_seconds`: a server that does not reply to the query in time has its
        connection given up (not asked to cancel, which would wait on it too) and is reported to the watch."""
        started = time.monotonic()
        writable = False
        try:
            async with asyncio.timeout(timeout_seconds):
                conn = await self._connection()
            server = server_of(conn)
            with answered_within(conn, timeout_seconds - (time.monotonic() - started)) as bound:
                try:
                    row = await (await conn.execute(queries.SESSION_PING)).fetchone()
                    writable = bool(row and row[0])
                finally:
                    if bound.given_up is not None and self._watch is not None:
                        self._watch.suspect(server)
        except (psycopg.Error, OSError, TimeoutError, Unavailable):
            writable = False
        if not writable:
            # Reconnect next time: a multi-host URL then finds the server that takes writes now.
            await self.close()
        return writable

    async def _connection(self) -> psycopg.AsyncConnection:
        if self._conn is None or self._conn.closed:
            url = self._url if self._watch is None else self._watch.conninfo(self._url)
            self._conn = await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                application_name=self._application_name,
                prepare_threshold=self._prepare_threshold,
            )
            if self._watch is not None:
                self._watch.connected(self._conn)
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
