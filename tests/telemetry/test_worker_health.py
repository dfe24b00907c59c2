"""The workers' own health (fairness/telemetry/worker_health.py) over the real Redis and database,
with the clock injected: heartbeats age without anyone waiting."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest
import redis
import redis.asyncio

from fairness.models import BatchStatus
from fairness.store import heartbeats, keyspace
from fairness.telemetry import worker_health
from fairness.telemetry.worker_health import Finding
from tests.support.batch_rows import carol_key, make_batch

pytestmark = pytest.mark.django_db(transaction=True)

LONG_UP = 0.0  # a process started at the epoch has been up for ever: no start-up grace


def found(redis_url: str, now: float, started: float = LONG_UP) -> dict[str, Finding]:
    async def read() -> list[Finding]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await worker_health.findings(client, clock=lambda: now, started=started)
        finally:
            await client.aclose()

    return {f.topic: f for f in asyncio.run(read())}


def push_usage(client: redis.Redis, at: float, latency_ms: int = 0, n: int = 1) -> None:
    client.rpush(keyspace.USAGE_EVENTS, *[json.dumps({"request_id": f"r{at}-{i}", "at": at, "latency_ms": latency_ms})
                                          for i in range(n)])


def test_a_periodic_heartbeat_a_few_seconds_old_is_ok(redis_url, redis_client):
    now = time.time()
    heartbeats.record(redis_client, heartbeats.PERIODIC, clock=lambda: now - 3)
    periodic = found(redis_url, now)["Periodic tasks"]
    assert periodic.state == "ok" and "3 s ago" in periodic.words


def test_a_periodic_heartbeat_61_seconds_old_is_a_problem_that_says_what_to_start(redis_url, redis_client):
    now = time.time()
    heartbeats.record(redis_client, heartbeats.PERIODIC, clock=lambda: now - 61)
    periodic = found(redis_url, now)["Periodic tasks"]
    assert periodic.problem
    assert "No periodic task has run for 1 min (more than 1 min" in periodic.words
    assert "celery -A gpuportal beat" in periodic.words


def test_no_heartbeat_yet_is_no_alarm_during_the_first_minute_and_a_problem_after(redis_url):
    started = time.time()
    assert found(redis_url, started + 30, started)["Periodic tasks"].state == "waiting"
    late = found(redis_url, started + 61, started)["Periodic tasks"]
    assert late.problem and "No periodic task has been seen running" in late.words


def test_batches_waiting_with_no_batch_worker_heartbeat_are_a_problem(cast, redis_url, redis_client):
    make_batch(carol_key(cast), BatchStatus.VALIDATING, started_ago=dt.timedelta(minutes=3))
    now = time.time()
    heartbeats.record(redis_client, heartbeats.PERIODIC, clock=lambda: now - 1)  # beat itself is fine
    batch = found(redis_url, now)["Batch worker"]
    assert batch.problem
    assert "1 unfinished batch, created 3 min ago, and no batch worker has been seen in the" in batch.words
    assert "--queues batches" in batch.words

    heartbeats.record(redis_client, heartbeats.BATCHES, clock=lambda: now - 61)
    stale = found(redis_url, now)["Batch worker"]
    assert stale.problem and "no batch worker has checked for work for 1 min (more than 1 min)" in stale.words
    heartbeats.record(redis_client, heartbeats.BATCHES, clock=lambda: now - 4)
    assert found(redis_url, now)["Batch worker"].state == "ok"


def test_a_runner_renewing_its_claim_counts_as_a_live_batch_worker(cast, redis_url):
    # A runner holds its worker for a long slice and starts no task meanwhile: its claims say it lives.
    now = time.time()
    make_batch(carol_key(cast), runner="r1", runner_seen_at=dt.datetime.fromtimestamp(now - 5, dt.UTC))
    make_batch(carol_key(cast), started_ago=dt.timedelta(minutes=20, seconds=30))
    batch = found(redis_url, now)["Batch worker"]
    assert batch.state == "ok" and batch.words.startswith("2 unfinished batches, the oldest created 20 min ago")
    assert found(redis_url, now + 61)["Batch worker"].problem


def test_no_batch_waiting_needs_no_batch_worker(cast, redis_url):
    make_batch(carol_key(cast), BatchStatus.COMPLETED)
    batch = found(redis_url, time.time())["Batch worker"]
    assert batch.state == "ok" and batch.words == "No batch waits."


def test_usage_waiting_more_than_a_minute_is_a_problem_and_a_fresh_backlog_is_not(redis_url, redis_client):
    now = time.time()
    assert found(redis_url, now)["Usage flush"].state == "ok"
    # A long stream's event carries its start: it reached the list when the stream ended.
    push_usage(redis_client, at=now - 300, latency_ms=290_000, n=2)
    fresh = found(redis_url, now)["Usage flush"]
    assert fresh.state == "ok" and fresh.words == "2 usage events wait to be written to the database, " \
                                                  "the oldest for 10 s: keeping up."
    behind = found(redis_url, now + 51)["Usage flush"]
    assert behind.problem
    assert "the oldest for 1 min: behind (the flush keeps every event under 1 min old" in behind.words


def test_a_backlog_past_half_its_cap_is_a_problem_however_young(redis_url, redis_client, settings):
    settings.GP_USAGE_BACKLOG_MAX = 6
    now = time.time()
    push_usage(redis_client, at=now - 1, n=2)
    assert found(redis_url, now)["Usage flush"].state == "ok"
    push_usage(redis_client, at=now, n=1)
    behind = found(redis_url, now)["Usage flush"]
    assert behind.problem and "fewer than 3, half of GP_USAGE_BACKLOG_MAX, waiting" in behind.words


def test_a_heartbeat_that_cannot_be_written_does_not_stop_the_task(caplog):
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    heartbeats.record(unreachable, heartbeats.PERIODIC)  # the task goes on to its work
    assert "could not record the periodic worker's heartbeat" in caplog.text
