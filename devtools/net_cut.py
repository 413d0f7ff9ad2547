"""A TCP forwarder a test or a bench can cut, as a network drops a connection (issue 72).

Clients connect to ``port``; every connection is forwarded to ``target``. ``cut()`` aborts them
all on both sides at once: the server sees its peer vanish (no WebSocket close frame, code 1006)
and the client sees its socket die, as when a phone leaves Wi-Fi. Not a product part: a fault for tests and benches to inject.
"""

from __future__ import annotations

import asyncio
import contextlib


class CutProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []

    async def __aenter__(self) -> CutProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def cut(self) -> None:
        """Every connection through here dies now, without a goodbye to either side."""
        for client, upstream in self._pairs:
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._pairs.append((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
