"""Replica health, shared through Redis so every gateway process agrees.

One key per replica, `gp:{rt}:health:<name>`, holding "up" or "down" with a TTL:
  - active: `probe_all` GETs each replica's /health and writes the verdict with a TTL of a few
    probe intervals, so a prober that stops leaves no stale verdict behind;
  - passive: the request path calls `mark_down` when a replica refused or reset the connection,
    or answered 5xx before any response byte; the mark lasts one cooldown.
A replica is healthy unless its key says "down". Unknown (never probed, or expired) counts as
healthy, so a fresh gateway routes before the first probe. A probe that succeeds overwrites a
down mark, so a recovered replica takes its conversations back at once; the price is that a
probe answered just before a failure can clear that failure's mark, until the next probe.
Redis keeps the time (TTLs), so no process's clock matters here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import redis.asyncio

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.scheduling.directory import ReplicaInfo

NS = "gp:{rt}:"  # the same hash tag as routing's keys: one Redis Cluster slot for both
PROBE_LOCK = NS + "probe-lock"
UP, DOWN = b"up", b"down"
DEFAULT_INTERVAL = 2.0
DEFAULT_TIMEOUT = 1.0
DEFAULT_COOLDOWN = 10.0


def key(replica: ReplicaInfo) -> str:
    # The address is part of the key: a replica moved to a new address starts with no verdict
    # rather than inheriting the old address's.
    return f"{NS}health:{replica.name}@{replica.base_url}"


def from_marks(replicas: Sequence[ReplicaInfo], marks: Sequence[bytes | str | None]) -> set[str]:
    """The healthy names, given each replica's raw key value (None: never probed)."""
    return {r.name for r, mark in zip(replicas, marks) if mark not in (DOWN, DOWN.decode())}


async def healthy(client: redis.asyncio.Redis, replicas: Sequence[ReplicaInfo]) -> set[str]:
    if not replicas:
        return set()
    return from_marks(replicas, await client.mget([key(r) for r in replicas]))


async def mark_down(
    client: redis.asyncio.Redis, replica: ReplicaInfo, cooldown: float = DEFAULT_COOLDOWN
) -> None:
    await client.set(key(replica), DOWN, px=_ms(cooldown))


async def probe(replica: ReplicaInfo, timeout: float = DEFAULT_TIMEOUT) -> bool | None:
    """True or False, or None when it did not answer in time: a busy engine's front end can be
    slow to answer /health without being down, so a timeout gives no verdict."""
    try:
        response = await engine_client.get(replica, "/health", timeout)
    except ApiError as exc:  # refused, reset, timed out: the seam has already mapped it
        return None if exc.code == "upstream_timeout" else False
    return response.is_success


async def probe_all(
    client: redis.asyncio.Redis,
    replicas: Sequence[ReplicaInfo],
    timeout: float = DEFAULT_TIMEOUT,
    ttl: float = 3 * DEFAULT_INTERVAL,
) -> dict[str, bool]:
    """Probe every replica at once and publish the verdicts; returns name -> healthy."""
    results = await asyncio.gather(*(probe(r, timeout) for r in replicas))
    verdicts = {r.name: ok for r, ok in zip(replicas, results) if ok is not None}
    if verdicts:
        async with client.pipeline(transaction=False) as pipe:
            for replica, ok in zip(replicas, results):
                if ok is not None:
                    pipe.set(key(replica), UP if ok else DOWN, px=_ms(ttl))
            await pipe.execute()
    return verdicts


async def probe_if_due(
    client: redis.asyncio.Redis,
    replicas: Sequence[ReplicaInfo],
    interval: float = DEFAULT_INTERVAL,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, bool] | None:
    """`probe_all` at most once per interval across all processes; None when another did.

    Lets every gateway process run the same loop without multiplying the probes.
    """
    if not await client.set(PROBE_LOCK, b"1", nx=True, px=_ms(interval)):
        return None
    return await probe_all(client, replicas, timeout=min(timeout, interval), ttl=3 * interval)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
