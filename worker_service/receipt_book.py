"""Receipts written straight to PostgreSQL, each statement fenced by the attempt's lease."""

from __future__ import annotations

from shared.domain.errors import LeaseLost
from shared.domain.jobs import LeaseRef, Receipt
from shared.storage import receipt_store
from shared.storage.database import Database

STEP_MAX_CHARS = 200


class DatabaseReceiptBook:
    def __init__(self, db: Database, lease: LeaseRef) -> None:
        self._db = db
        self._lease = lease

    async def record_intent(self, step: str, intent: bytes) -> None:
        _check_step(step)
        async with self._db.transaction() as conn:
            if not await receipt_store.record_intent(conn, self._lease, step, intent):
                raise LeaseLost()

    async def confirm(self, step: str, receipt: bytes) -> None:
        _check_step(step)
        async with self._db.transaction() as conn:
            if not await receipt_store.confirm_receipt(conn, self._lease, step, receipt):
                raise LeaseLost()

    async def list(self) -> list[Receipt]:
        async with self._db.transaction() as conn:
            return await receipt_store.list_receipts(conn, self._lease.job_id)


def _check_step(step: str) -> None:
    if not step or len(step) > STEP_MAX_CHARS or "\x00" in step:
        raise ValueError(f"a receipt step is 1 to {STEP_MAX_CHARS} characters without NUL")
