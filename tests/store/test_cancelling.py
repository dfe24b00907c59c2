"""Background tasks end when they are told to, even where Python 3.11 drops a cancellation."""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio

from fairness.store.cancelling import cancel_and_wait


def test_a_task_that_drops_its_first_cancellation_is_cancelled_again_until_it_ends():
    async def scenario() -> int:
        dropped = 0

        async def stubborn() -> None:
            nonlocal dropped
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if dropped == 2:
                        raise
                    dropped += 1  # as wait_for does when the cancel meets the end of its work

        task = asyncio.ensure_future(stubborn())
        await asyncio.sleep(0)
        async with asyncio.timeout(5):
            await cancel_and_wait(task, again_after=0.01)
        assert task.cancelled()
        return dropped

    assert asyncio.run(scenario()) == 2


def test_a_redis_loop_cancelled_as_its_command_goes_out_ends(redis_url):
    """The real case: redis-py sends under wait_for, and a cancel that arrives with the write is
    dropped on Python 3.11; one plain cancel then left this loop running for ever."""

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url, socket_timeout=5)
        running = asyncio.Event()

        async def loop() -> None:
            while True:
                await client.get("gp:test:cancelling")
                running.set()

        task = asyncio.ensure_future(loop())
        try:
            await running.wait()
            async with asyncio.timeout(5):
                await cancel_and_wait(task)
            assert task.cancelled()
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_an_error_the_task_ended_with_is_logged_not_raised(caplog):
    async def scenario() -> None:
        async def failing() -> None:
            raise RuntimeError("broke while closing")

        task = asyncio.ensure_future(failing())
        await asyncio.sleep(0)
        await cancel_and_wait(task)

    with caplog.at_level(logging.ERROR, logger="fairness.store.cancelling"):
        asyncio.run(scenario())
    assert "broke while closing" in caplog.text

