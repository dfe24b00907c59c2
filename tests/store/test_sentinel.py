"""Redis behind Sentinel: the settings, and every client reaching the master the sentinels name,
following it when it moves (a demoted master answers READONLY, having run nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from fairness.store import redis_sentinel
from fairness.store.redis_lane import RedisLane, SentinelLane
from tests.support.sentinel_redis import MASTER_NAME, SentinelRedis
from tests.support.settings_process import load_settings


def url(db: int = 3) -> str:
    return f"redis://127.0.0.1:1/{db}"  # the address is the sentinels' to give; the database is the URL's


def run_id(port: int) -> str:
    return str(redis.Redis(port=port).info("server")["run_id"])


async def test_the_lane_reaches_the_master_the_sentinels_name(sentinels: SentinelRedis) -> None:
    client = redis_sentinel.async_master(url(), sentinels.addresses, MASTER_NAME)
    lane = RedisLane.like(client)
    try:
        assert isinstance(lane, SentinelLane)
        assert await lane.execute(("SET", "where", "here")) == [b"OK"]
        assert redis.Redis(port=sentinels.master, db=3).get("where") == b"here"
        assert lane.server_id == run_id(sentinels.master)
    finally:
        await lane.aclose()
        await client.aclose()


async def test_a_batch_refused_by_a_demoted_master_runs_once_on_the_new_one(sentinels: SentinelRedis) -> None:
    client = redis_sentinel.async_master(url(), sentinels.addresses, MASTER_NAME)
    lane = RedisLane.like(client)
    assert isinstance(lane, SentinelLane)
    met: list[str] = []

    async def on_new_server(server: str, exchange: Any) -> None:
        met.append(server)
        assert await exchange(("SET", "told", server)) == [b"OK"]  # before any batch of the lane's

    lane.on_new_server = on_new_server
    try:
        assert await lane.execute(("SET", "n", "5")) == [b"OK"]
        first = lane.server_id
        opened = lane.connections_opened
        new = await asyncio.to_thread(sentinels.remonitor)
        # The lane's connection still goes to the old master, now a replica: READONLY, then the
        # batch goes to the master the sentinels name now, and runs there once.
        assert await lane.execute(("INCR", "n")) == [6]
        assert redis.Redis(port=new, db=3).get("n") == b"6"
        assert lane.connections_opened == opened + 1
        assert met == [first, run_id(new)] and lane.server_id == run_id(new)
        assert redis.Redis(port=new, db=3).get("told") == run_id(new).encode()
    finally:
        await lane.aclose()
        await client.aclose()


async def test_the_redis_py_clients_follow_the_master(sentinels: SentinelRedis) -> None:
    sync = redis_sentinel.sync_master(url(), sentinels.addresses, MASTER_NAME,
                                      retry=redis.retry.Retry(redis.backoff.NoBackoff(), 1),
                                      retry_on_error=[redis.exceptions.ConnectionError])
    pooled = redis_sentinel.async_master(url(), sentinels.addresses, MASTER_NAME,
                                         retry=aredis.retry.Retry(redis.backoff.NoBackoff(), 1),
                                         retry_on_error=[redis.exceptions.ConnectionError])
    try:
        assert sync.set("a", "1") and await pooled.set("b", "1")
        new = await asyncio.to_thread(sentinels.remonitor)
        # Their pooled connections meet READONLY on the old master; the one retry goes to the new.
        assert sync.incr("a") == 2
        assert await pooled.incr("b") == 2
        assert redis.Redis(port=new, db=3).mget("a", "b") == [b"2", b"2"]
    finally:
        sync.close()
        await pooled.aclose()


def test_without_sentinels_the_lane_is_the_plain_one(redis_url: str) -> None:
    lane = RedisLane.like(aredis.Redis.from_url(redis_url))
    assert type(lane) is RedisLane and lane.server_id is None


def test_celery_and_the_cache_follow_the_sentinels_too() -> None:
    loaded = load_settings(
        "(settings.REDIS_SENTINELS, settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS, "
        "settings.CACHES['default']['OPTIONS'])",
        REDIS_URL="redis://:s3cret@ignored:6379/2", REDIS_SENTINELS="127.0.0.7:26379, s2:26380",
        REDIS_SENTINEL_MASTER="gp", CELERY_BROKER_URL="", SECRET_KEY="k" * 40,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == repr((
        [("127.0.0.7", 26379), ("s2", 26380)],
        "sentinel://:s3cret@127.0.0.7:26379/2;sentinel://:s3cret@s2:26380/2",
        {"master_name": "gp"},
        {"pool_class": "fairness.store.redis_sentinel.CachePool"},
    ))


@pytest.mark.parametrize(("sentinels", "master", "complaint"), [
    ("sentinel-0", "gp", "'sentinel-0' is not host:port"),
    ("s:0", "gp", "'s:0' is not host:port"),
    ("s:26379", "", "together"),
    ("", "gp", "together"),
])
def test_a_bad_sentinel_setting_stops_the_start(sentinels: str, master: str, complaint: str) -> None:
    loaded = load_settings("settings.REDIS_SENTINELS", REDIS_SENTINELS=sentinels, REDIS_SENTINEL_MASTER=master,
                           SECRET_KEY="k" * 40)
    assert loaded.returncode != 0
    assert "ImproperlyConfigured" in loaded.stderr and complaint in loaded.stderr
