"""The lane leans on one private part of redis-py: `redis._parsers.base.BaseParser.parse_error`,
which turns an error reply into redis-py's exception class, so that the lane's callers catch the
same exceptions as redis-py's own client raises. A redis-py upgrade that moves or changes it must
fail here, not in admission's recovery from an empty Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aredis
from redis.exceptions import NoScriptError, ResponseError

from fairness.scheduling.admission import _function_missing
from fairness.store.redis_lane import RedisLane
from tests.support.redis_server import PrivateRedis


def test_the_private_parser_maps_error_replies_to_redis_py_classes() -> None:
    from redis._parsers.base import BaseParser

    assert isinstance(BaseParser.parse_error("NOSCRIPT No matching script"), NoScriptError)
    wrong = BaseParser.parse_error("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert type(wrong) is ResponseError
    assert "WRONGTYPE" in str(wrong)


@pytest.fixture
async def lane() -> AsyncIterator[RedisLane]:
    server = PrivateRedis().start()
    client = aredis.Redis.from_url(server.url(db=3))
    lane = RedisLane.like(client)
    try:
        yield lane
    finally:
        await lane.aclose()
        await client.aclose()
        server.stop()


async def test_a_function_unknown_to_redis_reads_as_missing_through_the_lane(lane: RedisLane) -> None:
    # What admission sees when Redis restarted empty: it loads its library again on this reply.
    [reply] = await lane.execute(("FCALL", "gp_no_such_function", 0))
    assert isinstance(reply, ResponseError)
    assert _function_missing(reply)


async def test_an_error_reply_in_a_batch_leaves_the_other_replies_whole(lane: RedisLane) -> None:
    replies = await lane.execute(("SET", "k", "v"), ("EVALSHA", "0" * 40, 0), ("GET", "k"))
    assert replies[0] == b"OK"
    assert isinstance(replies[1], NoScriptError)
    assert replies[2] == b"v"
