"""Active health checks: GET each replica's /health and publish the verdicts (scheduling/health)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import redis.asyncio

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.scheduling import health
from fairness.scheduling.directory import ReplicaInfo


async def probe(replica: ReplicaInfo, timeout: float = health.DEFAULT_TIMEOUT) -> bool | None:
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
    timeout: float = health.DEFAULT_TIMEOUT,
    ttl: float = 3 * health.DEFAULT_INTERVAL,
) -> dict[str, bool]:
    """Probe every replica at once and publish the verdicts; returns name -> healthy."""
    results = await asyncio.gather(*(probe(r, timeout) for r in replicas))
    verdicts = {r: ok for r, ok in zip(replicas, results, strict=True) if ok is not None}
    await health.record_verdicts(client, verdicts, ttl)
    return {r.name: ok for r, ok in verdicts.items()}


async def probe_if_due(
    client: redis.asyncio.Redis,
    replicas: Sequence[ReplicaInfo],
    interval: float = health.DEFAULT_INTERVAL,
    timeout: float = health.DEFAULT_TIMEOUT,
) -> dict[str, bool] | None:
    """`probe_all` at most once per interval across all processes; None when another did."""
    if not await health.claim_probe_turn(client, interval):
        return None
    return await probe_all(client, replicas, timeout=min(timeout, interval), ttl=3 * interval)
