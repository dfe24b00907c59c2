"""A lean HTTP/1.1 client for the one hop that matters: gateway to engine.

Every proxied request crosses this hop, and a general-purpose client costs more here than all
the gateway's own logic: httpx and httpcore build request and response models, run trace hooks
and scan their pool under locks on every send. The engine speaks plain HTTP/1.1 with keep-alive
on a trusted network, so this module does only that: a request written as one byte string, the
response parsed by httptools (the parser uvicorn uses), the body handed over as it arrives, and
idle connections kept per event loop and address.

Failures are raised as httpx's exceptions, so callers map them the same way as for the rest of
the outbound seam.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools
import httpx

MAX_IDLE_PER_ADDRESS = 256  # as many as a big engine runs at once; more are closed on return
HIGH_WATER = 256 * 1024  # buffered body bytes before the engine is asked to wait for a slow client
MAX_HEAD_BYTES = 64 * 1024  # status line and headers; an engine's are a few hundred bytes


class ResponseTooLarge(httpx.RemoteProtocolError):
    """The engine's headers, or a body read whole, are larger than the gateway accepts: a
    misbehaving engine must not fill the gateway's memory."""


def _breaks_a_line(text: str) -> bool:
    return "\r" in text or "\n" in text or "\0" in text


def _check_headers(headers: dict[str, str]) -> None:
    """A CR or LF in a header would end it and start another (a key from the database, say);
    refuse it before anything is written. The value is not quoted: it may be a secret."""
    for name, value in headers.items():
        if _breaks_a_line(name) or _breaks_a_line(value):
            raise httpx.LocalProtocolError(f"the {name!r} header holds CR, LF or NUL; the request was not sent")


class EngineAnswer(Protocol):
    """An engine's response: its status once the headers are in, its body read or streamed
    (this client's EngineResponse, or httpx's Response for an engine behind TLS)."""

    status_code: int

    async def aread(self) -> bytes: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class _Connection(asyncio.Protocol):
    """One TCP connection and the response currently arriving on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, address: tuple[str, int]) -> None:
        self.loop = loop
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.reset()

    def reset(self) -> None:
        """Ready for the next exchange on this connection."""
        self.parser = httptools.HttpResponseParser(self)
        self.status_code = 0
        self.headers_done = False
        self.framed = False  # a length or chunked encoding says where the body ends
        self.complete = False
        self.keep_alive = False
        self.received_any = False
        self.head_bytes = 0  # received before the headers were complete
        self.error: Exception | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response from the engine: {exc}"))
            self.close()
            return
        if not self.headers_done:
            # The parser keeps a header until it ends: count what it holds, whatever its shape.
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail(ResponseTooLarge(f"the engine's response headers exceed {MAX_HEAD_BYTES} bytes"))
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.framed:
            self.on_message_complete()  # an answer without a length ends when the connection does
        if not self.complete:
            self._fail(httpx.ReadError("the engine closed the connection") if self.received_any
                       else httpx.RemoteProtocolError("the engine closed the connection without answering"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status_code = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # for the response
    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser makes progress, the connection fails, or `timeout` passes."""
        waiter = self.waiter = self.loop.create_future()
        timer = None if timeout is None else self.loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) > 1 else self.chunks.popleft()
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("the engine did not answer in time"))


class EngineResponse:
    """The engine's answer: the status once headers are in, the body read or streamed."""

    def __init__(
        self, pool: _Pool, connection: _Connection, read_timeout: float | None, max_body: int | None = None
    ) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self._read_timeout = read_timeout
        self._max_body = max_body  # for aread(); a stream is handed over piece by piece, uncapped
        self.status_code = connection.status_code

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer encoding removed, nothing else)."""
        connection = self._connection
        if connection is None:
            return
        while True:
            if connection.chunks:
                yield connection.take()
                continue
            if connection.complete:
                break
            if connection.error is not None:
                raise connection.error
            await connection.wait(self._read_timeout)
        await self.aclose()

    async def aread(self) -> bytes:
        """The whole body; ResponseTooLarge (and the connection closed) past `max_body` bytes."""
        chunks: list[bytes] = []
        size, limit = 0, self._max_body
        async for chunk in self.aiter_raw():
            size += len(chunk)
            if limit is not None and size > limit:
                await self.aclose()
                raise ResponseTooLarge(f"the engine's response body exceeds {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        """Give the connection back when the answer is complete; otherwise close it, which tells
        the engine to stop generating."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if connection.complete and connection.keep_alive and not connection.closed and connection.error is None:
            self._pool.put_back(connection)
        else:
            connection.close()


class _Pool:
    """Idle keep-alive connections of one event loop, by address; newest first."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.idle: dict[tuple[str, int], deque[_Connection]] = {}

    async def connect(self, address: tuple[str, int], timeout: float, fresh: bool = False) -> _Connection:
        """A kept connection to `address` if one is idle (unless `fresh`), else a new one."""
        idle = None if fresh else self.idle.get(address)
        while idle:
            connection = idle.pop()
            transport = connection.transport
            # Anything that arrived on an idle connection is not an answer to us: drop it.
            if not connection.closed and not connection.received_any and transport and not transport.is_closing():
                connection.reused = True
                return connection
        try:
            async with asyncio.timeout(timeout):
                _, connection = await self.loop.create_connection(
                    lambda: _Connection(self.loop, address), address[0], address[1]
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {address[0]}:{address[1]} in time") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {address[0]}:{address[1]}: {exc.strerror or exc}") from None
        return connection

    def put_back(self, connection: _Connection) -> None:
        address = connection.address
        idle = self.idle.setdefault(address, deque())
        if len(idle) >= MAX_IDLE_PER_ADDRESS:
            connection.close()
            return
        connection.reset()
        idle.append(connection)

    def close(self) -> None:
        for idle in self.idle.values():
            for connection in idle:
                connection.close()
        self.idle.clear()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = _Pool(loop)
    return pool


def close_pool() -> None:
    """Close the running loop's idle connections."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        pool.close()


@functools.lru_cache(maxsize=256)  # a handful of replica URLs, parsed once, not per request
def _address(url: str) -> tuple[tuple[str, int], str, str]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise httpx.UnsupportedProtocol(f"only plain http:// engine addresses are supported, not {url!r}")
    port = parts.port or 80
    host_header = parts.netloc.rpartition("@")[2]
    return (parts.hostname, port), host_header, parts.path.rstrip("/")


async def post(
    base_url: str, path: str, body: bytes, headers: dict[str, str], *, connect_timeout: float, read_timeout: float,
    max_response_bytes: int | None = None,
) -> EngineResponse:
    """POST `body` and return once the response headers are in; the body streams after.

    A reused keep-alive connection that the engine has closed meanwhile fails before any byte
    of an answer; the request then goes once more on a fresh connection (not another kept one:
    an engine closes the connections idle since the same moment together, and this loop may not
    have seen it yet). `max_response_bytes` caps what the response's aread() takes.
    """
    _check_headers(headers)
    address, host, prefix = _address(base_url)
    head = [f"POST {prefix}{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"]
    head.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    head.append("\r\n")
    message = "".join(head).encode("latin-1") + body
    pool = _pool()
    for attempt in (1, 2):
        connection = await pool.connect(address, connect_timeout, fresh=attempt == 2)
        try:
            return await _exchange(pool, connection, message, read_timeout, max_response_bytes)
        except (httpx.RemoteProtocolError, httpx.WriteError):
            if attempt == 2 or not connection.reused or connection.received_any:
                raise
    raise AssertionError("unreachable")


async def _exchange(
    pool: _Pool, connection: _Connection, message: bytes, read_timeout: float, max_body: int | None
) -> EngineResponse:
    transport = connection.transport
    if transport is None or transport.is_closing():
        raise httpx.WriteError("the connection closed before the request was sent")
    try:
        transport.write(message)
        while not connection.headers_done:
            if connection.error is not None:
                raise connection.error
            await connection.wait(read_timeout)
    except BaseException:
        connection.close()
        raise
    return EngineResponse(pool, connection, read_timeout, max_body)
