"""Handlers' log lines: many attempts' lines in one fenced statement, read back page by page."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.job_logs import LOG_SEQUENCE_MAX, AttemptLog, JobLogLine, LogLine, LogPosition
from shared.domain.jobs import ReportOutcome
from shared.storage.database import Connection
from shared.storage.refusals import refusals
from shared.storage.sql_loader import load_sql_blocks

_logs = load_sql_blocks("logs.sql")
LOG_APPEND_BATCH = _logs.pop("log_append_batch")
LOG_LIST = _logs.pop("log_list")
if _logs:
    raise RuntimeError(f"SQL blocks without a constant: {sorted(_logs)}")


async def append_batch(conn: Connection, logs: Sequence[AttemptLog]) -> list[ReportOutcome]:
    """Per-attempt outcomes in input order; a refused attempt's lines are stored nowhere."""
    rows = [(log.lease, sequence, line) for log in logs for sequence, line in log.lines]
    cur = await conn.execute(
        LOG_APPEND_BATCH,
        {
            "job_ids": [lease.job_id for lease, _, _ in rows],
            "fencing_tokens": [lease.fencing_token for lease, _, _ in rows],
            "sequences": [sequence for _, sequence, _ in rows],
            "ats": [line.at for _, _, line in rows],
            "levels": [line.level for _, _, line in rows],
            "loggers": [line.logger for _, _, line in rows],
            "messages": [line.message for _, _, line in rows],
            "sequence_max": LOG_SEQUENCE_MAX,
        },
    )
    held = {(str(row["job_id"]), row["fencing_token"]) for row in await cur.fetchall()}
    refused = await refusals(conn, [log.job_id for log in logs if (log.job_id, log.lease.fencing_token) not in held])
    return [refused.get(log.job_id, ReportOutcome.ACCEPTED) for log in logs]


async def list_lines(
    conn: Connection, tenant: TenantId, job_id: JobId, *, attempt: int, after: LogPosition, limit: int
) -> list[JobLogLine]:
    cur = await conn.execute(
        LOG_LIST,
        {
            "tenant": tenant,
            "job_id": job_id,
            "attempt": attempt,
            "after_fencing_token": after.fencing_token,
            "after_sequence": after.sequence,
            "limit": limit,
        },
    )
    return [
        JobLogLine(
            row["attempt"],
            FencingToken(row["fencing_token"]),
            row["sequence"],
            LogLine(row["at"], row["level"], row["logger"], row["message"]),
        )
        for row in await cur.fetchall()
    ]
