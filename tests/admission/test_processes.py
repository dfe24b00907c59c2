"""Across real OS processes: caps hold under concurrency, and a SIGKILLed gateway's leases and
tickets vanish within one lease TTL, after which a waiter is granted."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import redis.asyncio as aredis

from fairness.scheduling.admission import Admission
from fairness.store import keyspace
from tests.support.admission import GROUP, alice, bob, carol, eventually, like, queued, start

WORKER = Path(__file__).with_name("worker.py")
Make = Callable[..., Awaitable[Admission]]


async def spawn(config: dict[str, Any]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), json.dumps(config), stdout=asyncio.subprocess.PIPE
    )


@asynccontextmanager
async def holder(config: dict[str, Any]) -> AsyncIterator[asyncio.subprocess.Process]:
    """A gateway process that has taken its lease (killed on exit if still alive)."""
    proc = await spawn({"mode": "hold", **config})
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line.startswith(b"held "), line
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_caps_hold_across_processes_under_concurrency(
    make_admission: Make, redis_url: str, prefix: str
) -> None:
    capacity, reserve = 6, 2
    interactive = [
        like(alice, key_id=f"i{n}", max_wait_seconds=60, max_queued_per_key=20) for n in range(6)
    ]
    batch = [
        like(carol, key_id=f"b{n}", max_wait_seconds=60, max_queued_per_key=20) for n in range(4)
    ]
    admission = await make_admission(clock=time.time, lease_ttl=30.0)
    await admission.set_capacity(GROUP, capacity)
    check = f"{prefix}-check:"
    base = {
        "mode": "churn", "url": redis_url, "prefix": prefix, "check": check,
        "capacity": capacity, "reserve": reserve, "recheck": 0.2, "loops": 16, "iterations": 50,
        "max_hold": 0.004, "cancel_ratio": 0.15,
        "demands": [dataclasses.asdict(d) for d in interactive + batch],
    }
    procs = [await spawn({**base, "seed": n}) for n in range(4)]
    outputs = [await asyncio.wait_for(p.communicate(), 80) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    counts = [json.loads(out) for out, _ in outputs]

    client = aredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert await client.lrange(check + "violations", 0, -1) == []
        peaks = {k: int(v) for k, v in (await client.hgetall(check + "peak")).items()}
        # The run really pressed on every limit, so the checks above meant something.
        assert peaks[f"group:{GROUP}"] == capacity
        assert max(peaks[f"key:i{n}"] for n in range(6)) == 2
        assert peaks["pool:batch"] == 2
        assert 1 <= peaks[f"borrowed:{GROUP}"] <= capacity - reserve
        assert sum(c.get("borrowed", 0) for c in counts) > 0
        assert sum(c.get("cancelled", 0) for c in counts) > 0
        left = {k: v for h in ("group", "key", "pool", "borrowed")
                for k, v in (await client.hgetall(f"{check}{h}")).items() if v != "0"}
        assert left == {}
        stats = await admission.stats()
        assert stats["keys"] == {} and stats["tiers"] == {}
        assert stats["groups"][GROUP] == {"capacity": capacity, "in_flight": 0, "queued": 0}
        ns = keyspace.admission_namespace(prefix)
        for family in (keyspace.ADMISSION_LEASE, keyspace.ADMISSION_TICKET, keyspace.ADMISSION_STREAM,
                       keyspace.ADMISSION_STREAM_HEADS, keyspace.ADMISSION_ELIGIBLE, keyspace.ADMISSION_BORROWER_HEADS,
                       keyspace.ADMISSION_POOL_TICKETS, keyspace.ADMISSION_KEY_STREAMS, keyspace.ADMISSION_POOL_GROUPS):
            assert await client.keys(f"{ns}{family}*") == [], family
        assert await client.hlen(ns + keyspace.ADMISSION_HEAD_INDEX) == 0
    finally:
        await client.aclose()


async def test_a_killed_gateways_lease_goes_within_one_ttl_and_a_waiter_gets_it(
    make_admission: Make, redis_url: str, prefix: str
) -> None:
    ttl = 2.0  # renewed every ttl/3: a holder stalled for a second on a busy host keeps its lease
    admission = await make_admission(clock=time.time, lease_ttl=ttl, recheck_seconds=0.1)
    await admission.set_capacity(GROUP, 1)
    config = {"url": redis_url, "prefix": prefix, "ttl": ttl, "recheck": 0.1,
              "demand": dataclasses.asdict(bob)}
    async with holder(config) as proc:
        waiter = start(admission, alice)

        async def waiting() -> bool:
            return await queued(admission, "alice") == 1

        await eventually(waiting, what="alice to queue behind the holder")
        # Outlive the TTL while the holder is alive: its renewals keep the lease.
        done, _ = await asyncio.wait([waiter], timeout=2 * ttl)
        assert not done
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await proc.wait()
        grant = await asyncio.wait_for(waiter, 5)
        # Expiry within one TTL of the kill, found by the waiter's next recheck (0.1 s).
        assert time.monotonic() - killed_at < ttl + 0.6
        assert grant.queued_seconds >= 2 * ttl


async def test_a_killed_gateways_leases_and_tickets_vanish_with_nobody_waiting(
    make_admission: Make, redis_url: str, prefix: str
) -> None:
    ttl = 2.0
    admission = await make_admission(clock=time.time, lease_ttl=ttl, recheck_seconds=0.1)
    await admission.set_capacity(GROUP, 1)
    config = {"url": redis_url, "prefix": prefix, "ttl": ttl, "recheck": 0.1,
              "demand": dataclasses.asdict(bob), "queue": dataclasses.asdict(bob)}
    async with holder(config) as proc:

        async def bob_waits() -> bool:
            return await queued(admission, "bob") == 1

        await eventually(bob_waits, what="the holder's second request to queue")
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await proc.wait()

        async def gone() -> bool:
            return (await admission.stats())["keys"] == {}

        await eventually(gone, timeout=ttl + 2, what="the dead gateway's lease and ticket to go")
        assert time.monotonic() - killed_at < ttl + 0.6
