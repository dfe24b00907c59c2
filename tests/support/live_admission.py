"""Chat requests through a live gateway and what admission counts of them in Redis: bodies for the
cast, sending, holding streams open and dropping them, admission's figures, waiting on them from
async code, and the most requests an engine ran at once."""

from __future__ import annotations

import asyncio
import math
import time

import httpx
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fairness.scheduling.admission import Admission
from tests.support.cast import MODEL, Member
from tests.support.redis_db import TEST_REDIS_URL


def peak_overlap(entries: list[dict]) -> int:
    """The most requests that were in the engine at one moment."""
    events = []
    for entry in entries:
        events.append((entry["arrived"], 1))
        events.append((entry["ended"] if entry["ended"] is not None else math.inf, -1))
    peak = current = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts at a tie
        current += change
        peak = max(peak, current)
    return peak


def admission_stats() -> dict:
    async def read():
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client)
        try:
            return await admission.stats()
        finally:
            await admission.close()
            await client.aclose()

    return asyncio.run(read())


def nothing_held() -> bool:
    stats = admission_stats()
    return all(g["in_flight"] == 0 and g["queued"] == 0 for g in stats["groups"].values()) and not stats["keys"]


def chat_body(member: Member, max_tokens: int = 40, stream: bool = False, **extra) -> dict:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"{member.username} asks a question"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        "user": member.username,
        **extra,
    }


async def send(client: httpx.AsyncClient, url: str, member: Member, body: dict) -> httpx.Response:
    headers = {"authorization": f"Bearer {member.secret}"}
    if body.get("stream"):
        async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as response:
            await response.aread()
            return response
    return await client.post(url + "/v1/chat/completions", json=body, headers=headers)


def key_stats(member: Member) -> dict:
    return admission_stats()["keys"].get(member.unit, {"in_flight": 0, "queued": 0})


async def _holds(condition) -> bool:
    try:
        return await asyncio.to_thread(condition)
    except (RedisTimeoutError, RedisConnectionError):
        # One read of Redis that stalled (two real engines spinning on two cores once held this
        # process past the 5-s connect timeout) says nothing yet: poll again until the deadline.
        return False


async def wait_async(condition, timeout: float = 10.0) -> None:
    """Poll a blocking condition from async code, with a deadline."""
    deadline = time.monotonic() + timeout
    while not await _holds(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; admission: {await asyncio.to_thread(admission_stats)}")
        await asyncio.sleep(0.02)


async def hold(client: httpx.AsyncClient, url: str, member: Member, count: int) -> list[asyncio.Task]:
    """Start `count` long streams for `member` and return once all of them are admitted."""
    long = chat_body(member, max_tokens=4000, stream=True)  # ~2 s at speed 20: the most 4,096 allows
    tasks = [asyncio.create_task(send(client, url, member, long)) for _ in range(count)]
    await wait_async(lambda: key_stats(member)["in_flight"] == count)
    return tasks


async def drop(tasks: list[asyncio.Task]) -> None:
    """The clients of these requests hang up."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
