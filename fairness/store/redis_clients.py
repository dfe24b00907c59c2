"""Shared Redis clients: one async client per event loop, one sync client per process.

A pooled connection that died with Redis (a restart, a failover) is only found dead when it is
next used: each command is tried once more on a fresh connection after a connection error, so
once Redis answers again no request fails for it. Timeouts are not retried: the command may have
run.
"""

from __future__ import annotations

import asyncio
import functools
import weakref

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry
from django.conf import settings
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
    weakref.WeakKeyDictionary()
)


def redis_async() -> redis.asyncio.Redis:
    """The pooled async client of the running loop (a client must not cross loops)."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        # A burst beyond the pool waits for a free connection instead of failing.
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            settings.REDIS_URL, max_connections=512, timeout=10,
            retry=redis.asyncio.retry.Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError],
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


@functools.cache
def _sync_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, retry=redis.retry.Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError]
    )


def redis_sync() -> redis.Redis:
    return _sync_client(settings.REDIS_URL)
