"""Redis behind Sentinel: every client the project makes asks the sentinels where the master is.

REDIS_SENTINELS (host:port, ...) and REDIS_SENTINEL_MASTER (the master group's name) name the
sentinels; REDIS_URL still gives the database number, the credentials and TLS (its host and port
are not used then). The sentinels themselves get no password (Sentinel's own `requirepass` is
separate from the master's), but the same TLS as the master.

- redis-py clients (store/redis_clients.py) come from `Sentinel.master_for`: a pooled connection
  asks the sentinels for the master's address when it connects, and one that meets a demoted
  master (READONLY) is dropped and raises a ConnectionError, which the clients' one retry sends
  on a fresh connection.
- The lean lane (store/redis_lane.py's SentinelLane) asks `SENTINEL get-master-addr-by-name` at each connect.
- Celery's broker uses kombu's sentinel transport (`broker_url` below).
- Django's cache, through `CachePool`.

With Sentinel unset none of this is imported on the request path: the clients are built exactly
as before.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.connection import parse_url

Address = tuple[str, int]  # (host, port), as settings.REDIS_SENTINELS holds them


def connection_kwargs(url: str) -> dict[str, Any]:
    """What REDIS_URL says besides its address: database, credentials, TLS."""
    kwargs: dict[str, Any] = dict(parse_url(url))  # type: ignore[no-untyped-call]
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    kwargs.pop("path", None)
    ssl = kwargs.pop("connection_class", None) in (redis.SSLConnection, redis.asyncio.SSLConnection)
    if ssl:
        kwargs["ssl"] = True
    return kwargs


def _sentinel_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options of the connections to the sentinels: the master's timeouts and TLS, no
    credentials and no database (a sentinel has neither)."""
    return {k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl"))}


# redis-py (8.1) reconnects a dropped connection inside a command's retry straight to the address
# it had, not through the sentinels: the retry after READONLY went back to the demoted master and
# failed again. These reconnect through connect(), which asks the sentinels.


class _Following(redis.sentinel.SentinelManagedConnection):
    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class _FollowingTLS(_Following, redis.sentinel.SentinelManagedSSLConnection):
    pass


class _AsyncFollowing(redis.asyncio.sentinel.SentinelManagedConnection):
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[no-untyped-call]
        await super().send_packed_command(command, check_health)


class _AsyncFollowingTLS(_AsyncFollowing, redis.asyncio.sentinel.SentinelManagedSSLConnection):
    pass


class _AsyncMaster(redis.asyncio.Redis):
    """Closing the client closes its connections to the sentinels too: a process that makes one
    per event loop (a Celery task's asyncio.run) would otherwise leave them to the collector."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = cast(redis.asyncio.sentinel.SentinelConnectionPool, self.connection_pool)
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def async_master(url: str, sentinels: list[Address], master: str, **pool_kwargs: Any) -> redis.asyncio.Redis:
    kwargs = connection_kwargs(url) | pool_kwargs
    manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs=_sentinel_kwargs(kwargs), **kwargs)
    tls = kwargs.pop("ssl", False)
    client = manager.master_for(master, _AsyncMaster, connection_class=_AsyncFollowingTLS if tls else _AsyncFollowing)
    return cast(redis.asyncio.Redis, client)


def sync_master(url: str, sentinels: list[Address], master: str, **pool_kwargs: Any) -> redis.Redis:
    kwargs = connection_kwargs(url) | pool_kwargs
    manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinels, sentinel_kwargs=_sentinel_kwargs(kwargs), **kwargs)
    tls = kwargs.pop("ssl", False)
    client = manager.master_for(  # type: ignore[no-untyped-call]
        master, connection_class=_FollowingTLS if tls else _Following)
    return cast(redis.Redis, client)


def broker_url(url: str, sentinels: list[Address]) -> str:
    """Celery's broker through kombu's sentinel transport: `sentinel://...;sentinel://...`, each
    with REDIS_URL's credentials and database (kombu reads them from the first); the master's
    name goes in broker_transport_options."""
    kwargs = connection_kwargs(url)
    user = quote(kwargs.get("username") or "", safe="")
    password = quote(kwargs.get("password") or "", safe="")
    auth = f"{user}:{password}@" if password else ""
    db = kwargs.get("db") or 0
    return ";".join(
        f"sentinel://{auth}{'[' + host + ']' if ':' in host else host}:{port}/{db}" for host, port in sentinels
    )


class CachePool:
    """Django's Redis cache takes a pool class and asks it for a pool from a URL (OPTIONS
    pool_class): under Sentinel, the master's."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> redis.ConnectionPool:
        from django.conf import settings

        return sync_master(url, settings.REDIS_SENTINELS, settings.REDIS_SENTINEL_MASTER, **options).connection_pool
