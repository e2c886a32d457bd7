"""Connection pool and transactions; the one boundary where database errors become domain errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import psycopg
import psycopg.errors
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from shared.domain.errors import (
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    Unavailable,
)

Connection = psycopg.AsyncConnection[dict]


@dataclass(frozen=True)
class PoolSettings:
    url: str
    min_size: int = 1
    max_size: int = 10
    # How long a caller waits for a free connection before the request fails fast.
    acquire_timeout_seconds: float = 5.0
    application_name: str = "jobs"


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
    except psycopg.DataError as exc:
        raise InvalidArgument(FieldViolation("request", "a value is out of range")) from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        # Includes a lost COMMIT reply: the outcome is unknown, so the answer must be indeterminate.
        raise Unavailable("the database is unavailable") from exc


class Database:
    """An async pool whose transactions raise domain errors only."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, settings: PoolSettings, *, wait: bool = False) -> Database:
        """Opens the pool; without `wait` it connects in the background, so a down database
        does not stop the process from starting (health reports NOT_SERVING instead)."""
        pool = AsyncConnectionPool(
            settings.url,
            min_size=settings.min_size,
            max_size=settings.max_size,
            timeout=settings.acquire_timeout_seconds,
            kwargs={"row_factory": dict_row, "application_name": settings.application_name},
            open=False,
        )
        await pool.open(wait=wait)
        return cls(pool)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One transaction: committed when the block ends normally, rolled back otherwise."""
        with translate_db_errors():
            async with self._pool.connection() as conn:
                yield conn

    async def ping(self, timeout_seconds: float = 2.0) -> bool:
        try:
            async with self._pool.connection(timeout=timeout_seconds) as conn:
                await conn.execute("SELECT 1")
            return True
        except (psycopg.Error, PoolTimeout, OSError):
            return False

    def stats(self) -> dict[str, int]:
        return self._pool.get_stats()

    async def close(self) -> None:
        await self._pool.close()
