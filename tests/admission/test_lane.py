"""The multiplexed Redis lane against a real Redis: order, errors, failures, set-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aredis
from redis.exceptions import AuthenticationError, ConnectionError, NoScriptError, ResponseError, TimeoutError

from fairness.store.redis_lane import RedisLane
from tests.support.polling import async_wait_for
from tests.support.processes import free_port
from tests.support.redis_server import PrivateRedis


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aredis.Redis]:
    client = aredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def lane(client: aredis.Redis) -> AsyncIterator[RedisLane]:
    lane = RedisLane.like(client)
    yield lane
    await lane.aclose()


async def test_many_batches_at_once_each_get_their_own_replies(lane: RedisLane, prefix: str) -> None:
    async def one(n: int) -> list[object]:
        return await lane.execute(("INCRBY", f"{prefix}:{n}", n), ("GET", f"{prefix}:{n}"), ("ECHO", str(n)))

    replies = await asyncio.gather(*(one(n) for n in range(300)))
    assert replies == [[n, str(n).encode(), str(n).encode()] for n in range(300)]


async def test_an_error_reply_comes_back_in_its_place_and_the_rest_still_run(lane: RedisLane, prefix: str) -> None:
    key = f"{prefix}:word"
    ok, failed, value = await lane.execute(("SET", key, "v"), ("INCR", key), ("GET", key))
    assert (ok, value) == (b"OK", b"v")
    assert isinstance(failed, ResponseError)
    (missing,) = await lane.execute(("EVALSHA", "0" * 40, 0))
    assert isinstance(missing, NoScriptError)


async def test_it_works_in_the_database_of_the_client_it_is_like(
    lane: RedisLane, client: aredis.Redis, prefix: str
) -> None:
    await lane.execute(("SET", f"{prefix}:here", "1"))
    assert await client.get(f"{prefix}:here") == b"1"


async def test_a_caller_that_gives_up_does_not_shift_the_replies_of_others(lane: RedisLane, prefix: str) -> None:
    assert await lane.execute(("PING",)) == [b"PONG"]  # connected: the next command goes out at once
    with pytest.raises(asyncio.TimeoutError):  # gives up after its command went out
        await asyncio.wait_for(lane.execute(("BLPOP", f"{prefix}:never", "0.3")), timeout=0.05)
    assert await lane.execute(("ECHO", "mine")) == [b"mine"]  # not the BLPOP's nil


async def test_a_killed_connection_fails_what_was_in_flight_and_the_next_batch_reconnects(
    lane: RedisLane, client: aredis.Redis, prefix: str
) -> None:
    (before,) = await lane.execute(("CLIENT", "ID"))
    blocked = asyncio.ensure_future(lane.execute(("BLPOP", f"{prefix}:never", "0")))

    async def blocking_on(connection: int) -> bool:
        return any(int(c["id"]) == connection and c["cmd"] == "blpop" for c in await client.client_list())

    async def blocking_elsewhere() -> int | None:  # on this database: the server may be shared
        db = client.connection_pool.connection_kwargs.get("db", 0)
        return next((int(c["id"]) for c in await client.client_list()
                     if c["cmd"] == "blpop" and int(c["db"]) == db and int(c["id"]) != before), None)

    await async_wait_for(lambda: blocking_on(before), timeout=5, what="the lane's BLPOP to block")
    await client.client_kill_filter(_id=before)
    # A batch that loses the connection it was written on goes once more on a fresh one
    # (redis_lane: a restarted server looks like this); if that one dies too, the batch fails.
    retried = await async_wait_for(blocking_elsewhere, timeout=5, what="the BLPOP to be sent again")
    await client.client_kill_filter(_id=retried)
    with pytest.raises(ConnectionError):
        await blocked
    (after,) = await lane.execute(("CLIENT", "ID"))
    assert after not in (before, retried)


async def test_a_server_that_does_not_answer_in_time_is_a_timeout_and_the_lane_recovers(
    client: aredis.Redis, prefix: str
) -> None:
    lane = RedisLane(client.connection_pool.connection_kwargs, client.connection_pool.connection_class, timeout=0.3)
    try:
        with pytest.raises(TimeoutError):
            await lane.execute(("BLPOP", f"{prefix}:never", "0"))
        assert await lane.execute(("ECHO", "again")) == [b"again"]
    finally:
        await lane.aclose()


async def test_a_closed_port_is_a_connection_error() -> None:
    lane = RedisLane({"host": "127.0.0.1", "port": free_port()}, aredis.Connection)
    with pytest.raises(ConnectionError):
        await lane.execute(("PING",))


@pytest.fixture
def guarded_redis() -> Iterator[PrivateRedis]:
    """A private redis-server that wants a password."""
    server = PrivateRedis(password="sesame").start()
    yield server
    server.stop()


async def test_it_authenticates_and_selects_the_database_from_the_url(guarded_redis: PrivateRedis) -> None:
    client = aredis.Redis.from_url(guarded_redis.url(db=3))
    lane = RedisLane.like(client)
    try:
        assert await lane.execute(("SET", "k", "v")) == [b"OK"]
        assert await client.get("k") == b"v"  # the same database 3
        wrong = RedisLane.like(aredis.Redis.from_url(guarded_redis.url(db=3, password="wrong")))
        with pytest.raises(AuthenticationError):
            await wrong.execute(("PING",))
    finally:
        await lane.aclose()
        await client.aclose()
