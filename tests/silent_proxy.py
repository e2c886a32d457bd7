"""A TCP relay to PostgreSQL that can fall silent the way a hung server does.

While silent it still accepts connections and reads what clients send (as a stopped server's kernel
completes handshakes and buffers requests), but relays nothing either way, closes nothing and answers
nothing: clients see open, acknowledged, mute connections. Once it speaks again, everything it held is
delivered in order, as a thawed server would read its buffers. Two relays in front of one server make two
"hosts" of a multi-host URL, one of which can hang.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class SilentableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._speaking = threading.Event()
        self._speaking.set()
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._lock = threading.Lock()
        # Connections accepted, silent or not: each is a client's attempt to reach this "host".
        self.accepted = 0
        threading.Thread(target=self._accept, name="silent-proxy-accept", daemon=True).start()

    def url(self, user: str, database: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def fall_silent(self) -> None:
        self._speaking.clear()

    def speak_again(self) -> None:
        self._speaking.set()

    def close(self) -> None:
        self._closed = True
        self._speaking.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._link, args=(client,), name="silent-proxy-link", daemon=True).start()

    def _link(self, client: socket.socket) -> None:
        self._speaking.wait()  # a silent server does not even take the connection's first message
        if self._closed:
            _close(client)
            return
        try:
            server = socket.create_connection(self._upstream)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._sockets += [client, server]
        threading.Thread(target=self._pump, args=(server, client), name="silent-proxy-down", daemon=True).start()
        self._pump(client, server)

    def _pump(self, source: socket.socket, destination: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._speaking.wait()
                destination.sendall(data)
        except OSError:
            pass
        # An end of stream is held while silent too: the other side learns of it only when it would have.
        self._speaking.wait()
        _close(source)
        _close(destination)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
