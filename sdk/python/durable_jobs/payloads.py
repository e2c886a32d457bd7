"""How a caller's value becomes a job's payload bytes: the client's submissions and the test helper
encode alike."""

from __future__ import annotations

import dataclasses
import json


def encode_payload(payload: object) -> bytes:
    """bytes as they are; a str as UTF-8; a dataclass or any other JSON value as its JSON text."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8")
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        payload = dataclasses.asdict(payload)
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
