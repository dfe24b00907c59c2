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
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import hiredis
import redis.asyncio
import redis.asyncio.sentinel
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

Command = tuple[Any, ...]

log = logging.getLogger(__name__)


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

    # The run id of the server the connection reached, known behind Sentinel only
    # (SentinelLane, below): a new one means a new master, which may lack the latest writes.
    server_id: str | None = None

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
        if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool):
            return SentinelLane.following(pool, timeout)
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
        kwargs = self._kwargs
        protocol = await self._dial(kwargs.get("host", "localhost"), kwargs.get("port", 6379))
        hello = self._hello()
        self._protocol = protocol
        self.connections_opened += 1
        if hello:
            payload = b"".join([hiredis.pack_command(command) for command in hello])
            for reply in await self._send(protocol, payload, len(hello)).future:
                if isinstance(reply, Exception):
                    protocol.fail(RedisConnectionError(f"Redis refused the connection set-up: {reply}"))
                    raise reply
        return protocol

    async def _dial(self, host: str, port: int) -> _Protocol:
        """A new connection (the unix socket instead, if the URL named one); nothing sent yet."""
        loop = asyncio.get_running_loop()
        kwargs = self._kwargs
        connect_timeout = kwargs.get("socket_connect_timeout") or self._timeout or None
        try:
            async with asyncio.timeout(connect_timeout):
                if "path" in kwargs:
                    _, protocol = await loop.create_unix_connection(lambda: _Protocol(self), kwargs["path"])
                else:
                    _, protocol = await loop.create_connection(
                        lambda: _Protocol(self), host, port, ssl=self._ssl_context(),
                    )
        except TimeoutError as exc:  # the builtin one, from asyncio.timeout
            raise RedisTimeoutError("Timeout connecting to Redis") from exc
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting to Redis: {exc}") from exc
        return protocol

    def _hello(self) -> list[Command]:
        """The commands that set a new connection up: credentials, database."""
        kwargs = self._kwargs
        hello: list[Command] = []
        if kwargs.get("password"):
            hello.append(("AUTH", kwargs["username"], kwargs["password"]) if kwargs.get("username")
                         else ("AUTH", kwargs["password"]))
        if kwargs.get("db"):
            hello.append(("SELECT", kwargs["db"]))
        return hello

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


# -- behind Redis Sentinel ----------------------------------------------------------------------
# Each new connection asks the sentinels where the master is (SENTINEL get-master-addr-by-name,
# the first sentinel that answers), checks there that the server is a master (ROLE: right after a
# failover a sentinel may still name the old one, now a replica) and reads its run id. A master
# the lane has not met before (a promoted replica, or a restarted master) may lack the latest
# writes, replication being asynchronous: `on_new_server` is told before the connection carries
# anything else (admission holds its grants there, as after a restart), and `server_id` changes
# (the usage outbox pushes its recent events again). A demoted master still accepts connections
# and answers every write with READONLY, having run none of them (a script that writes and a MULTI
# are refused whole): a batch that gets a READONLY reply drops its connection and is sent once more
# on a new one, to the master the sentinels name now. Made only when Sentinel is configured
# (RedisLane.like); the plain lane does none of this work.

# Sends commands on the new connection, before anything else; the replies, errors as instances.
Exchange = Callable[..., Awaitable[list[Any]]]
# Told the new master's run id and given the exchange; what it raises fails the connection.
OnNewServer = Callable[[str, Exchange], Awaitable[None]]


class SentinelLane(RedisLane):
    """The lane to whichever server the sentinels name master, followed through failovers."""

    def __init__(
        self, connect_kwargs: dict[str, Any], connection_class: type, timeout: float | None,
        sentinels: Sequence[redis.asyncio.Redis], master: str,
    ) -> None:
        super().__init__(connect_kwargs, connection_class, timeout)
        self._sentinels = list(sentinels)
        self._master = master
        self.on_new_server: OnNewServer | None = None

    @classmethod
    def following(cls, pool: redis.asyncio.sentinel.SentinelConnectionPool, timeout: float | None) -> SentinelLane:
        """A lane to the master of a redis-py Sentinel pool, asking the same sentinels."""
        return cls(pool.connection_kwargs, pool.connection_class, timeout,
                   pool.sentinel_manager.sentinels, pool.service_name)

    async def execute(self, *commands: Command) -> list[Any]:
        replies = await super().execute(*commands)
        if not any(isinstance(reply, ReadOnlyError) for reply in replies):
            return replies
        protocol = self._protocol
        if protocol is not None:
            protocol.fail(RedisConnectionError("the Redis master was demoted (READONLY)"))
        return await super().execute(*commands)

    async def master_address(self) -> tuple[str, int]:
        """Where the sentinels say the master is: the first one that answers."""
        errors = []
        for sentinel in self._sentinels:
            try:
                address = await sentinel.sentinel_get_master_addr_by_name(self._master)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                errors.append(f"{exc}")
                continue
            if address:
                host, port = cast(tuple[Any, Any], address)
                return (host.decode() if isinstance(host, bytes) else str(host)), int(port)
            errors.append(f"a sentinel knows no master named {self._master!r}")
        raise redis.asyncio.sentinel.MasterNotFoundError(
            f"No Redis master found for {self._master!r}: {'; '.join(errors)}"
        )

    async def _open(self) -> _Protocol:
        # One bound for the whole set-up: the sentinels, the connection and the checks.
        timeout = self._kwargs.get("socket_connect_timeout") or self._timeout or None
        try:
            async with asyncio.timeout(timeout):
                return await self._open_master()
        except TimeoutError as exc:  # the builtin one, from asyncio.timeout
            raise RedisTimeoutError("Timeout connecting to the Redis master") from exc

    async def _open_master(self) -> _Protocol:
        protocol = await self._dial(*await self.master_address())
        # Not published as the lane's connection until it is set up: batches wait for it
        # (RedisLane._connect), so whatever on_new_server sends reaches the master first.

        async def exchange(*commands: Command) -> list[Any]:
            payload = b"".join([hiredis.pack_command(command) for command in commands])
            return await self._send(protocol, payload, len(commands)).future

        try:
            hello = self._hello()
            replies = await exchange(*hello, ("ROLE",), ("INFO", "server"))
            error = first_error(replies)
            if error is not None:
                raise RedisConnectionError(f"Redis refused the connection set-up: {error}")
            role, info = replies[-2], replies[-1]
            if _text(role[0]) != "master":
                raise RedisConnectionError("the server the sentinels named is not a master (yet)")
            run_id = _run_id(info)
            if run_id != self.server_id:
                if self.on_new_server is not None:
                    await self.on_new_server(run_id, exchange)
                if self.server_id is not None:
                    log.warning("Redis master %s is a new one (run id %s): failed over", self._master, run_id)
                self.server_id = run_id
        except BaseException as exc:
            if not protocol.lost:
                protocol.fail(RedisConnectionError(f"connection set-up failed: {exc}"))
            if isinstance(exc, RedisError) and not isinstance(exc, RedisConnectionError | RedisTimeoutError):
                raise RedisConnectionError(str(exc)) from exc
            raise
        self._protocol = protocol
        self.connections_opened += 1
        return protocol


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _run_id(info: Any) -> str:
    for line in _text(info).splitlines():
        if line.startswith("run_id:"):
            return line.removeprefix("run_id:").strip()
    raise RedisConnectionError("INFO server named no run_id")
