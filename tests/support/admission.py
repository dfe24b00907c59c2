"""The admission cast and the steps its tests take: real Redis, an injected clock, no sleeping to wait.

alice and bob are interactive keys (head start 600 s, two requests each), carol and dave are
batch keys (one request each, two for the whole batch pool, may borrow idle slots).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Callable
from typing import Any

from fairness.scheduling.admission import Admission, Demand, Grant

GROUP = "tiny-llm"
INTERACTIVE = Demand(
    key_id="alice", tier="interactive", per_key_cap=2, pool_cap=None, head_start_seconds=600.0,
    borrow=False, max_queued_per_key=10, max_wait_seconds=300.0, group=GROUP,
)
BATCH = Demand(
    key_id="carol", tier="batch", per_key_cap=1, pool_cap=2, head_start_seconds=0.0,
    borrow=True, max_queued_per_key=10, max_wait_seconds=3600.0, group=GROUP,
)
alice = INTERACTIVE
bob = dataclasses.replace(INTERACTIVE, key_id="bob")
carol = BATCH
dave = dataclasses.replace(BATCH, key_id="dave")


def like(demand: Demand, **changes: Any) -> Demand:
    return dataclasses.replace(demand, **changes)


class FakeClock:
    """Wall-clock seconds that only move when a test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def eventually(
    check: Callable[[], Any], *, timeout: float = 5.0, what: str = "condition"
) -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


async def queued(admission: Admission, key_id: str) -> int:
    return (await admission.stats())["keys"].get(key_id, {"queued": 0})["queued"]


async def in_flight(admission: Admission, key_id: str) -> int:
    return (await admission.stats())["keys"].get(key_id, {"in_flight": 0})["in_flight"]


async def until_queued(admission: Admission, key_id: str, n: int = 1) -> None:
    async def reached() -> bool:
        return await queued(admission, key_id) >= n

    await eventually(reached, what=f"{n} ticket(s) of {key_id} queued")


def start(admission: Admission, demand: Demand) -> asyncio.Task[Grant]:
    return asyncio.get_running_loop().create_task(admission.acquire(demand))


async def enqueue(admission: Admission, demand: Demand) -> asyncio.Task[Grant]:
    """Start an acquire that must wait, and return once its ticket is in the queue."""
    before = await queued(admission, demand.key_id)
    task = start(admission, demand)
    await until_queued(admission, demand.key_id, before + 1)
    assert not task.done()
    return task


async def admitted(admission: Admission, demand: Demand, timeout: float = 5.0) -> Grant:
    """Acquire what must be granted at once (a bounded wait, so a broken test fails, not hangs)."""
    return await asyncio.wait_for(admission.acquire(demand), timeout)


async def granted(task: asyncio.Task[Grant], timeout: float = 5.0) -> Grant:
    return await asyncio.wait_for(asyncio.shield(task), timeout)
