"""Admission instances over real Redis with an injected clock (the cast of demands and the steps
the tests take are in tests/support/admission.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aredis

from fairness.scheduling.admission import Admission
from tests.support.admission import FakeClock


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/admission/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.timeout(90))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def make_admission(
    redis_url: str, clock: FakeClock, prefix: str
) -> AsyncIterator[Callable[..., Awaitable[Admission]]]:
    """Admission instances sharing one namespace, as gateway processes share Redis. Each has its
    own connection pool and pub/sub channel. Defaults suit the fake clock: leases live long (the
    clock jumps), rechecks are quick in real time."""
    made: list[tuple[Admission, aredis.Redis]] = []

    async def make(**options: Any) -> Admission:
        client = aredis.Redis.from_url(redis_url)
        options.setdefault("prefix", prefix)
        options.setdefault("clock", clock)
        options.setdefault("lease_ttl", 86_400.0)
        options.setdefault("recheck_seconds", 0.05)
        options.setdefault("reserve_slots", 2)  # the borrowing tests' arithmetic
        admission = Admission(client, **options)
        made.append((admission, client))
        return admission

    yield make
    for admission, client in made:
        await admission.close()
        await client.aclose()


@pytest.fixture
async def admission(make_admission: Callable[..., Awaitable[Admission]]) -> Admission:
    return await make_admission()
