"""Server-side console sessions. The browser holds only a random id; the session holds the digest of
the token it signed in with (never the token) and the CSRF token its forms must echo.

Sessions live in this process's memory: a restart signs everyone out, and behind several API replicas
the console needs sticky sessions or one replica serving it (docs/CONSOLE.md)."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

# More live sessions than this and the least recently used one ends: a bound on memory, far above
# the number of operators a deployment has.
SESSIONS_MAX = 1000
SESSION_ID_BYTES = 32
CSRF_TOKEN_BYTES = 32


@dataclass
class ConsoleSession:
    token_digest: bytes
    csrf_token: str
    started_at: float
    last_seen_at: float
    # A message for the next page (an action's outcome), shown once.
    flash: list[tuple[str, str]] = field(default_factory=list)

    def take_flash(self) -> list[tuple[str, str]]:
        messages, self.flash = self.flash, []
        return messages


class SessionStore:
    def __init__(self, *, idle_seconds: float, max_seconds: float) -> None:
        self._idle_seconds = idle_seconds
        self._max_seconds = max_seconds
        # Keyed by the id's hash, so that even this process's memory holds no usable cookie value.
        self._sessions: OrderedDict[bytes, ConsoleSession] = OrderedDict()

    def start(self, token_digest: bytes) -> tuple[str, ConsoleSession]:
        """A new session and the id for its cookie."""
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        now = time.monotonic()
        session = ConsoleSession(token_digest, secrets.token_urlsafe(CSRF_TOKEN_BYTES), now, now)
        self._sessions[_key(session_id)] = session
        while len(self._sessions) > SESSIONS_MAX:
            self._sessions.popitem(last=False)
        return session_id, session

    def find(self, session_id: str) -> ConsoleSession | None:
        """The live session for the id, its idle clock reset; None when unknown or expired."""
        key = _key(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen_at > self._idle_seconds or now - session.started_at > self._max_seconds:
            del self._sessions[key]
            return None
        session.last_seen_at = now
        self._sessions.move_to_end(key)
        return session

    def end(self, session_id: str) -> None:
        self._sessions.pop(_key(session_id), None)


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()
