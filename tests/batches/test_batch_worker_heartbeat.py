"""A worker on the batches queue says it is alive even with nothing to run, so the staff home can
tell a waiting batch that has a worker from one that has none."""

from __future__ import annotations

import time

from fairness.store import heartbeats, keyspace
from tests.support.polling import wait_for


def test_a_batch_worker_with_nothing_to_run_still_beats(redis_client, runner):
    started = time.time()

    def seen(worker: str) -> float:
        at = redis_client.hget(keyspace.WORKER_HEARTBEATS, worker)
        return float(at) if at is not None else 0.0

    first = wait_for(lambda: seen(heartbeats.BATCHES) >= started and seen(heartbeats.BATCHES), timeout=30,
                     what="the batch worker's heartbeat", evidence=runner.log_tail)
    wait_for(lambda: seen(heartbeats.BATCHES) > first, timeout=10, what="a later one", evidence=runner.log_tail)
