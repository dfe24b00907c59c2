"""One multiplexed Redis connection per event loop, for the round trips every request makes.

Every proxied request takes a lease and gives it back (with its accounting) in one round trip
each. Through redis-py's pooled client each of those costs more CPU than the round trip itself:
a pool checkout under a condition variable, a timeout context per read and a task per write,
retry and observability wrappers. Redis answers the commands of one connection in order, so a
single connection can carry every request's commands at once: each batch is packed in one call
(hiredis), written back to back with the others, and its replies handed to its future as they
are parsed. A connection that breaks fails the batches in flight (as redis-py's exceptions) and
the next batch opens a new one.

A restarted Redis leaves the old connection looking open until its close is read: a batch written
there "succeeds", then fails as the close arrives, although Redis is back. So a batch that fails
because its connection closed, before any of its replies came, is sent once more on a fresh
connection, but only if that connection was open before the batch: a connection opened for it
that closes at once means Redis is really down, and the batch fails fast. A timeout (a server that
does not answer) is never retried. The retry is safe for what the lane carries: if Redis did run
the batch before closing (a rare CLIENT KILL or crash between execution and reply; a restarted
server never saw it), admission's scripts are idempotent by handle (a second release or renewal of
the same lease changes nothing; an acquire sent twice finds its ticket or lease), and a usage
event sent twice is written once (the flush dedupes by request id, accounting/usage.py); only the gateway's
request counters would count such a request twice.

Replies that are errors come back as exception instances in the reply list, not raised: the
caller decides, e.g. to load a script Redis has forgotten and resend only that command.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import redis.asyncio
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

Command = tuple[Any, ...]


class _Batch:
    __slots__ = ("future", "wanted", "replies", "sent_at")

    def __init__(self, future: asyncio.Future[list[Any]], wanted: int, sent_at: float) -> None:
        self.future = future
        self.wanted = wanted
        self.replies: list[Any] = []
        self.sent_at = sent_at


class _Closed(RedisConnectionError):
    """The connection closed under the batch (not a timeout, not garbage, not the lane closing)."""


class _Protocol(asyncio.Protocol):
    def __init__(self, lane: RedisLane) -> None:
        self.lane = lane
        self.reader = hiredis.Reader(replyError=BaseParser.parse_error)
        self.transport: asyncio.Transport | None = None
        self.batches: deque[_Batch] = deque()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        batches = self.batches
        try:
            while True:
                reply = self.reader.gets()
                if reply is False:
                    return
                batch = batches[0]
                batch.replies.append(reply)
                if len(batch.replies) == batch.wanted:
                    batches.popleft()
                    if not batch.future.done():
                        batch.future.set_result(batch.replies)
        except (hiredis.ProtocolError, IndexError):  # garbage, or a reply nobody asked for
            self.fail(RedisConnectionError("Redis sent a reply that does not match any command"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(_Closed(f"Redis closed the connection: {exc}" if exc else "Redis closed the connection"))

    def fail(self, error: Exception) -> None:
        self.lost = True
        while self.batches:
            batch = self.batches.popleft()
            if not batch.future.done():
                batch.future.set_exception(error)
        if self.transport is not None:
            self.transport.close()
        self.lane._forget(self)


class RedisLane:
    """Send command batches over one shared connection; `execute` is one round trip."""

    def __init__(self, connect_kwargs: dict[str, Any], connection_class: type, timeout: float | None = 5.0) -> None:
        self._kwargs = connect_kwargs
        self._class = connection_class
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        # Bumped by each new connection: whoever must know that Redis may have restarted since
        # (the usage outbox) compares it, at no cost to the batches.
        self.connections_opened = 0

    @classmethod
    def like(cls, client: redis.asyncio.Redis) -> RedisLane:
        """A lane to the server, database and credentials of a redis-py client."""
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        timeout = kwargs.get("socket_timeout", 5.0)
        return cls(kwargs, pool.connection_class, timeout)

    async def execute(self, *commands: Command) -> list[Any]:
        """Every command's reply, in order; error replies as exception instances."""
        protocol = self._protocol
        fresh = protocol is None or protocol.lost
        if fresh:
            protocol = await self._connect()
        assert protocol is not None
        payload = b"".join([hiredis.pack_command(command) for command in commands])
        batch = self._send(protocol, payload, len(commands))
        try:
            return await batch.future
        except _Closed:
            if fresh or batch.replies:  # Redis is down, or it may have run part of the batch
                raise
        # The connection died before this batch reached a live server: once more, on a new one.
        return await self._send(await self._connect(), payload, len(commands)).future

    async def get(self, key: str) -> Any:
        """GET in one round trip: the value (bytes) or None; an error reply is raised."""
        (reply,) = await self.execute(("GET", key))
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _send(self, protocol: _Protocol, payload: bytes, wanted: int) -> _Batch:
        loop = asyncio.get_running_loop()
        batch = _Batch(loop.create_future(), wanted, time.monotonic())
        protocol.batches.append(batch)
        assert protocol.transport is not None
        protocol.transport.write(payload)
        if self._timeout and self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._check_overdue)
        return batch

    @property
    def connected(self) -> bool:
        """Whether a connection is open (as far as the lane has seen)."""
        return self._protocol is not None and not self._protocol.lost

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._protocol is not None:
            self._protocol.fail(RedisConnectionError("the lane was closed"))

    def _forget(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None

    def _check_overdue(self) -> None:
        """A server that stops answering fails its batches after the timeout (one timer for the
        whole connection, not one per command)."""
        self._watchdog = None
        protocol = self._protocol
        if protocol is None or not protocol.batches:
            return
        assert self._timeout
        oldest = protocol.batches[0].sent_at
        overdue_at = oldest + self._timeout
        now = time.monotonic()
        if now >= overdue_at:
            protocol.fail(RedisTimeoutError(f"Redis did not answer within {self._timeout:g} s"))
        else:
            self._watchdog = asyncio.get_running_loop().call_later(overdue_at - now, self._check_overdue)

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done():
                self._connecting = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        kwargs = self._kwargs
        connect_timeout = kwargs.get("socket_connect_timeout") or self._timeout or None
        try:
            async with asyncio.timeout(connect_timeout):
                if "path" in kwargs:
                    _, protocol = await loop.create_unix_connection(lambda: _Protocol(self), kwargs["path"])
                else:
                    _, protocol = await loop.create_connection(
                        lambda: _Protocol(self), kwargs.get("host", "localhost"), kwargs.get("port", 6379),
                        ssl=self._ssl_context(),
                    )
        except TimeoutError as exc:  # the builtin one, from asyncio.timeout
            raise RedisTimeoutError("Timeout connecting to Redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
        hello: list[Command] = []
        if kwargs.get("password"):
            hello.append(("AUTH", kwargs["username"], kwargs["password"]) if kwargs.get("username")
                         else ("AUTH", kwargs["password"]))
        if kwargs.get("db"):
            hello.append(("SELECT", kwargs["db"]))
        self._protocol = protocol
        self.connections_opened += 1
        if hello:
            payload = b"".join([hiredis.pack_command(command) for command in hello])
            for reply in await self._send(protocol, payload, len(hello)).future:
                if isinstance(reply, Exception):
                    protocol.fail(RedisConnectionError(f"Redis refused the connection set-up: {reply}"))
                    raise reply
        return protocol

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not issubclass(self._class, redis.asyncio.SSLConnection):
            return None
        context = ssl.create_default_context(cafile=self._kwargs.get("ssl_ca_certs"))
        if self._kwargs.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def first_error(replies: Sequence[Any]) -> Exception | None:
    return next((reply for reply in replies if isinstance(reply, Exception)), None)
