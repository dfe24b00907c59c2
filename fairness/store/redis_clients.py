"""Shared Redis clients: one async client per event loop, one sync client per process."""

from __future__ import annotations

import asyncio
import functools
import weakref

import redis
import redis.asyncio
from django.conf import settings

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
            settings.REDIS_URL, max_connections=512, timeout=10
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


@functools.cache
def _sync_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def redis_sync() -> redis.Redis:
    return _sync_client(settings.REDIS_URL)
