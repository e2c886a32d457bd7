"""A TCP proxy between a service and PostgreSQL that can lose the reply to a COMMIT.

It reads the client's side of the wire protocol (plaintext only: connect with sslmode=disable) just
enough to see each message's type and text. Once armed, the next COMMIT sent on a connection that
inserted into `jobs` is forwarded; the server's answer is read and thrown away, and only after the
server has confirmed the commit is the client's connection cut. The client is left not knowing whether
its transaction committed, although it did: exactly a reply lost in the network.
"""

from __future__ import annotations

import socket
import struct
import threading
from contextlib import suppress

STARTUP_CODES_WITHOUT_REPLY_TYPE = {80877103, 80877104}  # SSLRequest, GSSENCRequest
COMMIT_CONFIRMED = b"C\x00\x00\x00\x0bCOMMIT\x00"
WRITE_MARKER = b"INSERT INTO jobs"


class LostCommitProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._armed = threading.Event()
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="pg-proxy-accept", daemon=True).start()

    def arm(self) -> None:
        """The next COMMIT after an INSERT INTO jobs loses its reply (once)."""
        self.dropped.clear()
        self._armed.set()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, server]
            link = _Link(client, server, self._armed, self.dropped)
            threading.Thread(target=link.client_to_server, name="pg-proxy-up", daemon=True).start()
            threading.Thread(target=link.server_to_client, name="pg-proxy-down", daemon=True).start()


class _Link:
    def __init__(
        self, client: socket.socket, server: socket.socket, armed: threading.Event, dropped: threading.Event
    ) -> None:
        self._client = client
        self._server = server
        self._armed = armed
        self._dropped = dropped
        self._swallowing = threading.Event()
        self._wrote_jobs = False

    def client_to_server(self) -> None:
        buffer = b""
        started = False
        try:
            while True:
                data = self._client.recv(65536)
                if not data:
                    break
                buffer += data
                while True:
                    message, buffer, started = _next_message(buffer, started)
                    if message is None:
                        break
                    self._inspect(message)
                    self._server.sendall(message)
        except OSError:
            pass
        finally:
            if not self._swallowing.is_set():
                _close(self._client, self._server)

    def _inspect(self, message: bytes) -> None:
        kind, body = message[:1], message[5:]
        if kind in (b"Q", b"P") and WRITE_MARKER in body:
            self._wrote_jobs = True
        if kind == b"Q" and body.rstrip(b"\x00").strip().upper() == b"COMMIT":
            if self._wrote_jobs and self._armed.is_set():
                self._armed.clear()
                self._swallowing.set()
            self._wrote_jobs = False

    def server_to_client(self) -> None:
        seen = b""
        try:
            while True:
                data = self._server.recv(65536)
                if not data:
                    break
                if not self._swallowing.is_set():
                    self._client.sendall(data)
                    continue
                seen += data
                if COMMIT_CONFIRMED in seen:
                    break  # committed on the server; the client never hears of it
        except OSError:
            pass
        finally:
            if self._swallowing.is_set():
                self._dropped.set()
            _close(self._client, self._server)


def _next_message(buffer: bytes, started: bool) -> tuple[bytes | None, bytes, bool]:
    """Splits one protocol message off the front of `buffer`: the untyped startup packet (and any
    SSL/GSS request before it) first, then typed messages."""
    if not started:
        if len(buffer) < 8:
            return None, buffer, False
        (length, code) = struct.unpack("!II", buffer[:8])
        if len(buffer) < length:
            return None, buffer, False
        return buffer[:length], buffer[length:], code not in STARTUP_CODES_WITHOUT_REPLY_TYPE
    if len(buffer) < 5:
        return None, buffer, True
    (length,) = struct.unpack("!I", buffer[1:5])
    if len(buffer) < 1 + length:
        return None, buffer, True
    return buffer[: 1 + length], buffer[1 + length :], True


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with suppress(OSError):
            sock.close()
