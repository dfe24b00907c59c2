"""Replica health verdicts, shared through Redis so every gateway process agrees.

One key per replica (keyspace.health_verdict) holding "up", "down" or "failing" with a TTL:
  - active: the gateway probes each replica's /health (gateway/health_probes.py) and records
    "up" or "down" with a TTL of a few probe intervals, so a prober that stops leaves no stale
    verdict behind;
  - passive: the request path calls `mark_down` when a replica refused or reset the connection
    before any response byte; the mark lasts one cooldown. A 5xx answer or a timeout is first
    that request's own error (a body that makes the engine fail must not take the replica from
    everyone): `record_failure` counts it per caller, and only failures of FAILURE_CALLERS
    different callers within FAILURE_WINDOW seconds mark the replica "failing". The count lives
    in Redis (keyspace.health_failures), so every gateway process adds to the same one.
A replica is healthy unless its key says "down" or "failing". Unknown (never probed, or expired)
counts as healthy, so a fresh gateway routes before the first probe. A probe that succeeds
overwrites a "down" mark, so a replica back from a restart takes its conversations back at once.
It leaves a "failing" mark alone: an engine whose HTTP front answers /health while every request
stalls or fails would otherwise be put back within one probe interval, to fail the next callers.
Redis keeps the time (TTLs), so no process's clock matters here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import redis.asyncio

from fairness.scheduling.directory import ReplicaInfo
from fairness.store import keyspace

UP, DOWN, FAILING = b"up", b"down", b"failing"
NOT_HEALTHY = frozenset({DOWN, FAILING, DOWN.decode(), FAILING.decode()})
DEFAULT_INTERVAL = 2.0
DEFAULT_TIMEOUT = 1.0
DEFAULT_COOLDOWN = 10.0
FAILURE_WINDOW = 10.0  # seconds
FAILURE_CALLERS = 3  # different callers failing within the window mark a replica down
_FAILURE_SCRIPT = (Path(__file__).with_name("lua") / "health_failure.lua").read_text()
_VERDICTS_SCRIPT = (Path(__file__).with_name("lua") / "health_verdicts.lua").read_text()


def key(replica: ReplicaInfo) -> str:
    return keyspace.health_verdict(replica.name, replica.base_url)


def from_marks(replicas: Sequence[ReplicaInfo], marks: Sequence[bytes | str | None]) -> set[str]:
    """The healthy names, given each replica's raw key value (None: never probed)."""
    return {
        r.name for r, mark in zip(replicas, marks, strict=True) if mark not in NOT_HEALTHY
    }


async def healthy(client: redis.asyncio.Redis, replicas: Sequence[ReplicaInfo]) -> set[str]:
    if not replicas:
        return set()
    return from_marks(replicas, await client.mget([key(r) for r in replicas]))


async def mark_down(
    client: redis.asyncio.Redis, replica: ReplicaInfo, cooldown: float = DEFAULT_COOLDOWN
) -> None:
    await client.set(key(replica), DOWN, px=_ms(cooldown))


async def record_failure(
    client: redis.asyncio.Redis, replica: ReplicaInfo, caller: str, cooldown: float = DEFAULT_COOLDOWN,
    window: float = FAILURE_WINDOW, callers: int = FAILURE_CALLERS,
) -> bool:
    """Count a request of `caller` that failed on `replica`; True when that marked it failing.
    Runs only when a request fails: a successful request costs nothing here."""
    marked = await client.eval(
        _FAILURE_SCRIPT, 2, keyspace.health_failures(replica.name, replica.base_url), key(replica),
        caller, _ms(window), callers, _ms(cooldown),
    )
    return bool(marked)


async def record_verdicts(
    client: redis.asyncio.Redis, verdicts: Mapping[ReplicaInfo, bool], ttl: float
) -> None:
    """Publish probe verdicts (True: up) for `ttl` seconds, except over a "failing" mark."""
    if not verdicts:
        return
    keys = [key(replica) for replica in verdicts]
    values = [UP if ok else DOWN for ok in verdicts.values()]
    await client.eval(_VERDICTS_SCRIPT, len(keys), *keys, *values, _ms(ttl))


async def claim_probe_turn(client: redis.asyncio.Redis, interval: float) -> bool:
    """True for at most one caller per interval across all processes: every gateway process
    runs the same health loop without multiplying the probes."""
    return bool(await client.set(keyspace.HEALTH_PROBE_LOCK, b"1", nx=True, px=_ms(interval)))


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
