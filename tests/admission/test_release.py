"""Every slot taken is given back: on success, on error, on cancellation while queued or while
held, when a grant races a cancellation, and (idempotently) when released twice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import Admission, Grant
from tests.support.admission import GROUP, admitted, alice, bob, enqueue, eventually, granted, in_flight, like, queued

zed = like(bob, key_id="zed")


async def assert_idle(admission: Admission) -> None:
    stats = await admission.stats()
    assert stats["keys"] == {} and stats["tiers"] == {}
    assert stats["groups"][GROUP]["in_flight"] == 0 and stats["groups"][GROUP]["queued"] == 0


async def test_it_releases_slot_when_the_request_succeeds(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    async with admission.held(alice) as grant:
        assert await in_flight(admission, "alice") == 1 and not grant.borrowed
    await assert_idle(admission)


async def test_it_releases_slot_when_the_request_fails(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    with pytest.raises(RuntimeError, match="upstream exploded"):
        async with admission.held(alice):
            raise RuntimeError("upstream exploded")
    await assert_idle(admission)


async def test_it_leaves_the_queue_at_once_when_the_waiting_client_disconnects(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, alice)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await queued(admission, "alice") == 0  # no waiting for any timer
    after = await enqueue(admission, bob)
    await admission.release(blocker)
    await granted(after)


async def test_it_releases_slot_when_the_client_disconnects_mid_stream(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 1)
    streaming = asyncio.Event()

    async def proxy() -> None:
        async with admission.held(alice):
            streaming.set()
            await asyncio.Event().wait()  # the body streams until the client goes away

    task = asyncio.get_running_loop().create_task(proxy())
    await eventually(streaming.is_set, what="the stream to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_idle(admission)


async def test_a_grant_racing_a_disconnect_is_given_back(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    blocker = await admitted(admission, zed)
    task = await enqueue(admission, alice)
    release = asyncio.get_running_loop().create_task(admission.release(blocker))
    task.cancel()  # in the same breath as the grant
    await release
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await eventually(lambda: task.done())
    if not task.cancelled():  # the grant won: the caller owns the lease and gives it back
        await admission.release(task.result())
    await assert_idle(admission)


async def test_release_twice_is_harmless(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 2)
    grant = await admitted(admission, alice)
    other = await admitted(admission, alice)
    await admission.release(grant)
    await admission.release(grant)
    assert await in_flight(admission, "alice") == 1
    await admission.release(other)
    await assert_idle(admission)


async def test_release_survives_the_releasing_coroutine_being_cancelled(
    admission: Admission,
) -> None:
    await admission.set_capacity(GROUP, 1)
    grant: Grant = await admitted(admission, alice)
    task = asyncio.get_running_loop().create_task(admission.release(grant))
    await asyncio.sleep(0)  # let it send the script, then cancel it mid-flight
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

    async def idle() -> bool:
        return await in_flight(admission, "alice") == 0

    await eventually(idle, what="the shielded release to land")


async def test_renew_reports_a_lease_that_is_gone(admission: Admission) -> None:
    await admission.set_capacity(GROUP, 1)
    grant = await admitted(admission, alice)
    assert await admission.renew(grant) is True
    await admission.release(grant)
    assert await admission.renew(grant) is False


async def test_release_sends_the_callers_commands_in_the_same_round_trip(
    admission: Admission, redis_url: str, prefix: str
) -> None:
    await admission.set_capacity(GROUP, 1)
    holder = await admitted(admission, alice)
    waiting = await enqueue(admission, zed)
    note = f"{prefix}:note"
    await admission.release(holder, also=[("RPUSH", note, "settled")])
    await admission.release(await granted(waiting))  # the release still granted the next one
    await assert_idle(admission)
    async with _client(redis_url) as client:
        assert await client.lrange(note, 0, -1) == [b"settled"]


async def test_release_with_commands_survives_redis_forgetting_its_functions(
    admission: Admission, redis_url: str, prefix: str
) -> None:
    await admission.set_capacity(GROUP, 1)
    holder = await admitted(admission, alice)
    async with _client(redis_url) as client:
        await client.function_flush()  # as after a Redis restart
        await admission.release(holder, also=[("RPUSH", f"{prefix}:note", "settled")])
        assert await client.llen(f"{prefix}:note") == 1
    await assert_idle(admission)


@contextlib.asynccontextmanager
async def _client(url: str) -> AsyncIterator[aredis.Redis]:
    client = aredis.Redis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()
