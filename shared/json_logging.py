"""One JSON object per log line, with the job fields passed through `extra=`."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from shared.domain.jobs import Job

# Fields that transitions carry (job id, tenant, kind, attempt, fencing token) and a few more.
CONTEXT_FIELDS = (
    "job_id",
    "tenant",
    "kind",
    "attempt",
    "fencing_token",
    "state",
    "worker_id",
    "reason",
    "actor",
    "count",
    "traceback",
)


def job_fields(job: Job, **more: object) -> dict[str, object]:
    """The `extra=` of a log line about a transition of `job` (a Job: job_id, tenant, kind, attempts,
    fencing_token, state)."""
    return {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "kind": job.kind,
        "attempt": job.attempts,
        "fencing_token": job.fencing_token,
        "state": job.state.value,
        **more,
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, service: str) -> None:
    """Replaces the root handlers: JSON lines on stderr at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger(service).setLevel(level)
