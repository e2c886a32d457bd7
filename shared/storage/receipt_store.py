"""Receipts of external calls, each write fenced by the attempt's lease."""

from __future__ import annotations

from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import LeaseRef, Receipt
from shared.storage import queries
from shared.storage.database import Connection


async def record_intent(conn: Connection, lease: LeaseRef, step: str, intent: bytes) -> bool:
    """False when the lease is no longer held (nothing was written)."""
    cur = await conn.execute(
        queries.RECEIPT_RECORD_INTENT,
        {"job_id": lease.job_id, "fencing_token": lease.fencing_token, "step": step, "intent": intent},
    )
    return await cur.fetchone() is not None


async def confirm_receipt(conn: Connection, lease: LeaseRef, step: str, receipt: bytes) -> bool:
    """False when the lease is no longer held or no intent was recorded for the step."""
    cur = await conn.execute(
        queries.RECEIPT_CONFIRM,
        {"job_id": lease.job_id, "fencing_token": lease.fencing_token, "step": step, "receipt": receipt},
    )
    return await cur.fetchone() is not None


async def list_receipts(conn: Connection, job_id: JobId) -> list[Receipt]:
    cur = await conn.execute(queries.RECEIPT_LIST, {"job_id": job_id})
    return [
        Receipt(
            attempt=r["attempt"],
            step=r["step"],
            fencing_token=FencingToken(r["fencing_token"]),
            intent=bytes(r["intent"]),
            receipt=bytes(r["receipt"]) if r["receipt"] is not None else None,
            recorded_at=r["recorded_at"],
            confirmed_at=r["confirmed_at"],
        )
        for r in await cur.fetchall()
    ]
