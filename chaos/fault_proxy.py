"""A TCP relay on loopback between the services and PostgreSQL that cuts connections or delays their
traffic on command: the network faults of a chaos run. It runs its own event loop in a thread of its
own, so a busy runner never slows the traffic it relays except when told to.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

CHUNK_BYTES = 65536
CONNECT_TIMEOUT_SECONDS = 2.0
START_TIMEOUT_SECONDS = 10.0


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter

    def abort(self) -> None:
        for side in (self.client, self.server):
            transport = side.transport
            if not transport.is_closing():
                transport.abort()


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listen_port = listen_port
        self._links: set[_Link] = set()
        self._delay_seconds = 0.0
        self._delay_until = 0.0
        self._loop = asyncio.new_event_loop()
        self._ready: Future[int] = Future()
        self._thread = threading.Thread(target=self._run, name="chaos-fault-proxy", daemon=True)
        self._thread.start()
        self.port = self._ready.result(timeout=START_TIMEOUT_SECONDS)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", self._listen_port))
        except OSError as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(server.sockets[0].getsockname()[1])
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for link in list(self._links):
                link.abort()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection(*self._upstream), CONNECT_TIMEOUT_SECONDS
            )
        except (OSError, TimeoutError):
            # The server is down: the client sees its connection closed, as it would be refused.
            client_writer.transport.abort()
            return
        link = _Link(client_writer, server_writer)
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(client_reader, server_writer), self._pump(server_reader, client_writer))
        finally:
            self._links.discard(link)
            link.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(CHUNK_BYTES):
                if time.monotonic() < self._delay_until:
                    await asyncio.sleep(self._delay_seconds)
                writer.write(data)
                await writer.drain()
        # One side closed: the other is closed too, as a relay in the network would leave nothing half-open.
        writer.transport.abort()

    async def cut(self) -> int:
        """Resets every connection now open (each side sees its peer vanish); returns how many."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._cut(), self._loop))

    async def _cut(self) -> int:
        links = list(self._links)
        for link in links:
            link.abort()
        return len(links)

    def delay(self, seconds_per_chunk: float, for_seconds: float) -> None:
        """Holds every chunk relayed in either direction for `seconds_per_chunk`, for the next `for_seconds`
        (or until a delay already in force ends, if later)."""
        self._delay_seconds = seconds_per_chunk
        self._delay_until = max(self._delay_until, time.monotonic() + for_seconds)

    def heal(self) -> None:
        self._delay_until = 0.0

    def close(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_TIMEOUT_SECONDS)
