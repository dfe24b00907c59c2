"""Waiting for a condition with a deadline, never for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = "",
    evidence: Callable[[], str] | None = None,
) -> T:
    """`evidence`, read only on a timeout, adds what explains it (a process's log, say)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = f"\n{evidence()}" if evidence is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}{said}")
        time.sleep(interval)


async def async_wait_for(
    condition: Callable[[], Awaitable[T]], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        await asyncio.sleep(interval)
