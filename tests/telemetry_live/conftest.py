from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from enginesim.load import ClosedLoopUsers
from enginesim.process import EngineSimProcess, start_enginesim
from fairness.gateway import engine_client
from fairness.models import Replica
from fairness.store.redis_clients import redis_async
from fairness.telemetry import polling
from tests.support.cast import MODEL
from tests.support.polling import wait_for


def run(coro_fn, *args):
    """Run one async unit in a fresh loop, closing the clients it opened on that loop."""

    async def wrapped():
        try:
            return await coro_fn(*args)
        finally:
            await redis_async().aclose()
            await engine_client.aclose()

    return asyncio.run(wrapped())


def poll() -> polling.Poll:
    return run(polling.poll_once)


def load_on(url: str, users: int, max_tokens: int = 2000) -> ClosedLoopUsers:
    """`users` clients each keeping one long request in flight straight at an engine."""
    return ClosedLoopUsers(url, MODEL, users, max_tokens)


@pytest.fixture
def engine(transactional_db, redis_url) -> Iterator[EngineSimProcess]:
    """A registered replica whose per-sequence step cost is large enough to shape the curve."""
    process = start_enginesim(model=MODEL, max_num_seqs=8,
                              extra_args=["--speed", "4", "--step-per-seq-ms", "2"])
    Replica.objects.create(name="sim-cap", base_url=process.url, model=MODEL, max_num_seqs=8)
    yield process
    process.stop()


def running_is(engine: EngineSimProcess, n: int) -> None:
    wait_for(lambda: engine.stats()["running"] == n, timeout=10, what=f"{n} sequences running")
