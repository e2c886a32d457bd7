"""Statements that fail on purpose (JOBS_FAULT_INJECTION), so that every caller's handling of the two
failures a storage layer meets in production is exercised all the time, not only when a network or a
server happens to fail: a statement that never reached the server, and a COMMIT whose reply was lost
after the server committed. Off unless set; chaos runs (`make chaos`) and part of the test suite turn
it on. Both surface as psycopg.OperationalError, as the real failures do, so the one translation in
`database.translate_db_errors` makes them `Unavailable`: the indeterminate answer the contract promises.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Self

import psycopg
from psycopg.abc import Params, Query
from psycopg.rows import DictRow

log = logging.getLogger(__name__)

# Above this, too few transactions get through for a service to do anything but fail.
FAULT_INJECTION_MAX = 0.5


class InjectedFault(psycopg.OperationalError):
    """A failure made on purpose; the callers cannot tell it from a real one, and must not."""


class FaultKind(enum.StrEnum):
    # Raised before the statement is sent: the transaction rolls back, nothing was written.
    STATEMENT_NOT_SENT = "statement_not_sent"
    # The statement runs and its transaction commits; the caller is told the connection failed.
    COMMIT_REPLY_LOST = "commit_reply_lost"


@dataclass
class _TransactionFaults:
    lose_commit_reply: bool = False


# The transaction the current task is in, when faults are on: a statement picked for a lost reply marks it.
_current: ContextVar[_TransactionFaults | None] = ContextVar("jobs_injected_faults", default=None)


class StatementFaults:
    """Picks `fraction` of the statements run through its cursors; half of those are not sent, the other
    half let their transaction commit and then lose the COMMIT's reply."""

    def __init__(self, fraction: float, rng: random.Random | None = None) -> None:
        if not 0.0 <= fraction <= FAULT_INJECTION_MAX:
            raise ValueError(f"fault injection fraction must be between 0 and {FAULT_INJECTION_MAX}, got {fraction}")
        self.fraction = fraction
        self._rng = rng or random.Random()

    @classmethod
    def from_fraction(cls, fraction: float) -> StatementFaults | None:
        """None when off (0); on, said at warning level, so that it is never on unnoticed."""
        if fraction == 0:
            return None
        log.warning("JOBS_FAULT_INJECTION=%g: that fraction of database statements fail on purpose", fraction)
        return cls(fraction)

    def cursor_class(self) -> type[psycopg.AsyncCursor[DictRow]]:
        """The cursor every connection of the pool makes (psycopg's `cursor_factory`); conn.execute uses it."""
        faults = self

        class FaultInjectingCursor(psycopg.AsyncCursor[DictRow]):
            # `query` as Any: psycopg's own signature is a pair of overloads (with and without a template).
            async def execute(
                self,
                query: Any,
                params: Params | None = None,
                *,
                prepare: bool | None = None,
                binary: bool | None = None,
            ) -> Self:
                faults.before_statement()
                return await super().execute(query, params, prepare=prepare, binary=binary)

            async def executemany(self, query: Query, params_seq: Iterable[Params], *, returning: bool = False) -> None:
                faults.before_statement()
                await super().executemany(query, params_seq, returning=returning)

        return FaultInjectingCursor

    def before_statement(self) -> None:
        if self._rng.random() >= self.fraction:
            return
        transaction = _current.get()
        if transaction is not None and self._rng.random() < 0.5:
            transaction.lose_commit_reply = True
            return
        _announce(FaultKind.STATEMENT_NOT_SENT)
        raise InjectedFault("injected fault: the statement was not sent")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Spans one transaction; when the block ends normally (committed) after a statement was picked
        for it, the COMMIT's reply is lost."""
        faults = _TransactionFaults()
        token = _current.set(faults)
        try:
            yield
        finally:
            _current.reset(token)
        if faults.lose_commit_reply:
            _announce(FaultKind.COMMIT_REPLY_LOST)
            raise InjectedFault("injected fault: the reply to COMMIT was lost")


def _announce(kind: FaultKind) -> None:
    # One line per fault, so that a chaos run counts them from the logs of processes it may have killed.
    log.warning("injected fault: %s", kind.value, extra={"reason": kind.value})


def pool_connection_kwargs(faults: StatementFaults | None) -> dict[str, Any]:
    """What the pool passes to each connection it opens so that its statements go through `faults`."""
    return {} if faults is None else {"cursor_factory": faults.cursor_class()}
