"""A replica's /health endpoint with no engine behind it, for the health probe's tests."""

from __future__ import annotations

import asyncio


class HealthServer:
    """A minimal HTTP/1.1 server whose /health answers `status`; counts the probes it saw."""

    def __init__(self) -> None:
        self.status = 200
        self.probes = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # headers: not needed
            parts = request_line.split()
            status = self.status if len(parts) > 1 and parts[1] == b"/health" else 404
            self.probes += 1
            head = f"HTTP/1.1 {status} Status\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            writer.write(head.encode())
            await writer.drain()
        finally:
            writer.close()
