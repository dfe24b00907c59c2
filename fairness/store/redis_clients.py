"""Shared Redis clients: one async client per event loop, one sync client per process.

A pooled connection that died with Redis (a restart, a failover) is only found dead when it is
next used: each command is tried once more on a fresh connection after a connection error, so
once Redis answers again no request fails for it. Timeouts are not retried: the command may have
run. Behind Sentinel (REDIS_SENTINELS) the clients come from redis-py's Sentinel
(store/redis_sentinel.py): a fresh connection goes to the master the sentinels name, and one that
meets a demoted master (READONLY) counts as a connection error, so the retry follows a failover.
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
        if settings.REDIS_SENTINELS:
            client = _async_sentinel_client()
        else:
            # A burst beyond the pool waits for a free connection instead of failing.
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                settings.REDIS_URL, max_connections=512, timeout=10,
                retry=redis.asyncio.retry.Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError],
            )
            client = redis.asyncio.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


def _async_sentinel_client() -> redis.asyncio.Redis:
    """The master's client through the sentinels. Its pool does not block at its bound as the
    plain one does (redis-py has no blocking Sentinel pool): beyond 512 connections a command
    fails rather than waits, a bound no gateway process reaches (the per-request round trips go
    over the lane)."""
    from fairness.store import redis_sentinel  # only under Sentinel

    return redis_sentinel.async_master(
        settings.REDIS_URL, settings.REDIS_SENTINELS, settings.REDIS_SENTINEL_MASTER, max_connections=512,
        retry=redis.asyncio.retry.Retry(NoBackoff(), 1), retry_on_error=[RedisConnectionError],
    )


@functools.cache
def _sync_client(url: str) -> redis.Redis:
    retry = redis.retry.Retry(NoBackoff(), 1)
    if settings.REDIS_SENTINELS:
        from fairness.store import redis_sentinel  # only under Sentinel

        return redis_sentinel.sync_master(
            url, settings.REDIS_SENTINELS, settings.REDIS_SENTINEL_MASTER,
            retry=retry, retry_on_error=[RedisConnectionError],
        )
    return redis.Redis.from_url(url, retry=retry, retry_on_error=[RedisConnectionError])


def redis_sync() -> redis.Redis:
    return _sync_client(settings.REDIS_URL)
