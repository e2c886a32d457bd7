"""What a handler records during an attempt and reads back: failure categories, receipts of external
calls, stage checkpoints, and the bounds the service holds them to."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durable_jobs.ids import FencingToken

STAGE_MAX_CHARS = 200
# A record, not an output: a URI, an id, a digest fits many times over.
CHECKPOINT_DATA_MAX_BYTES = 16 * 1024
CHECKPOINTS_PER_JOB_MAX = 32
PROGRESS_MESSAGE_MAX_CHARS = 200


class ErrorCategory(enum.StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    OUTCOME_UNKNOWN = "outcome_unknown"


@dataclass(frozen=True)
class Receipt:
    """An external call of one attempt: its intent, and its confirmation once the call is known done."""

    attempt: int
    step: str
    fencing_token: FencingToken
    intent: bytes
    receipt: bytes | None
    recorded_at: datetime
    confirmed_at: datetime | None

    @property
    def confirmed(self) -> bool:
        return self.confirmed_at is not None


@dataclass(frozen=True)
class Checkpoint:
    """A finished stage, as an attempt recorded it."""

    stage: str
    data: bytes
    attempt: int
    fencing_token: FencingToken
    at: datetime

    def json(self) -> Any:
        """The record decoded from JSON: what `ctx.checkpoint(stage, value)` stored for a non-bytes value."""
        return json.loads(self.data)


def encode_checkpoint_data(value: object) -> bytes:
    """bytes are kept as they are; any other value is stored as its JSON text."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def stage_problem(stage: str) -> str | None:
    """Why `stage` cannot name a checkpoint, or None."""
    if not isinstance(stage, str) or not stage or len(stage) > STAGE_MAX_CHARS or "\x00" in stage:
        return f"a stage name is 1 to {STAGE_MAX_CHARS} characters without NUL"
    return None


def data_problem(data: bytes) -> str | None:
    if len(data) > CHECKPOINT_DATA_MAX_BYTES:
        return (
            f"a checkpoint's data is at most {CHECKPOINT_DATA_MAX_BYTES} bytes, not {len(data)}: store the stage's "
            "output elsewhere and checkpoint a pointer to it"
        )
    return None


def fraction_problem(fraction: float) -> str | None:
    if not isinstance(fraction, int | float) or not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0:
        return f"progress is a fraction from 0 to 1, not {fraction!r}"
    return None


def clean_progress_message(message: str) -> str:
    """Progress text as stored: cut to the bound, without NUL (a progress line is never worth a failure)."""
    return str(message).replace("\x00", "")[:PROGRESS_MESSAGE_MAX_CHARS]
