"""The lane survives a Redis restart: a batch written on the connection that died with the old
server goes again on a fresh one, while a Redis that is really down still fails fast."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aredis
from redis.exceptions import ConnectionError

from fairness.store.redis_lane import RedisLane
from tests.support.redis_server import PrivateRedis


@pytest.fixture
def store() -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


@pytest.fixture
async def lane(store: PrivateRedis) -> AsyncIterator[RedisLane]:
    client = aredis.Redis.from_url(store.url(db=2))
    lane = RedisLane.like(client)
    yield lane
    await lane.aclose()
    await client.aclose()


async def test_the_first_batch_after_redis_restarts_is_answered_by_the_new_server(
    store: PrivateRedis, lane: RedisLane
) -> None:
    assert await lane.execute(("SET", "kept", "1")) == [b"OK"]
    assert lane.connections_opened == 1
    # The event loop does not run meanwhile, so the lane has not yet read the old server's close:
    # the next batch is written on a connection that only looks open.
    store.stop()
    store.start()  # empty

    assert await lane.execute(("GET", "kept"), ("SET", "again", "2")) == [None, b"OK"]
    assert lane.connections_opened == 2  # on a new connection, in the database of the URL
    assert await aredis.Redis.from_url(store.url(db=2)).get("again") == b"2"


async def test_a_redis_that_is_down_fails_fast_without_a_second_try(store: PrivateRedis, lane: RedisLane) -> None:
    assert await lane.execute(("PING",)) == [b"PONG"]
    store.stop()
    with pytest.raises(ConnectionError):
        await lane.execute(("PING",))  # the stale connection fails, and so does the fresh one
    with pytest.raises(ConnectionError):
        await lane.execute(("PING",))  # no connection at all: refused, not retried
    store.start()
    assert await lane.execute(("PING",)) == [b"PONG"]


async def test_get_answers_the_value_or_none_and_raises_an_error_reply(lane: RedisLane) -> None:
    from redis.exceptions import ResponseError

    assert await lane.get("absent") is None
    await lane.execute(("SET", "present", "v"), ("LPUSH", "a-list", "x"))
    assert await lane.get("present") == b"v"
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await lane.get("a-list")
