"""No finished request's usage is lost to a Redis outage: what Redis could not take waits in the
gateway process and goes in once Redis is back; what a Redis restarted empty lost is pushed again;
and the flush still writes one row per request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
import redis.asyncio
from asgiref.sync import sync_to_async

from fairness.accounting import usage
from fairness.gateway import accounting
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.lifecycle import RequestLifecycle, demand_of
from fairness.gateway.process_counts import PROCESS_COUNTS
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings
from fairness.gateway.sse_relay import StreamTally
from fairness.gateway.tier_policy import TierPolicy
from fairness.gateway.usage_outbox import UsageOutbox
from fairness.models import ApiKey, UsageRecord
from fairness.store import keyspace
from fairness.store.redis_lane import RedisLane
from fairness.telemetry import gateway_metrics
from tests.support.metrics import Samples
from tests.support.polling import async_wait_for
from tests.support.redis_server import PrivateRedis

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def store(settings) -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    settings.REDIS_URL = server.url()
    yield server
    server.stop()


def key_info(key_id: int) -> KeyInfo:
    key = ApiKey.objects.select_related("tier").get(pk=key_id)
    return KeyInfo(id=key.pk, prefix=key.prefix, owner_id=key.owner_id, tier=TierPolicy.of(key.tier),
                   expires_at=None, revoked=False, owner_active=True)


def queued(store: PrivateRedis) -> list[str]:
    """Request ids of the events waiting in Redis for the flush."""
    with redis.Redis.from_url(store.url()) as client:
        return [json.loads(raw)["request_id"] for raw in client.lrange(keyspace.USAGE_EVENTS, 0, -1)]


def counters(store: PrivateRedis) -> dict[str, float]:
    with redis.Redis.from_url(store.url()) as client:
        return {k.decode(): float(v) for k, v in client.hgetall(keyspace.GATEWAY_COUNTERS).items()}


async def until_queued(store: PrivateRedis, *request_ids: str) -> None:
    async def there() -> bool:
        return set(request_ids) <= set(queued(store))

    await async_wait_for(there, timeout=15, what=f"{request_ids} to reach Redis")


def finish(runtime: GatewayRuntime, key: KeyInfo, request_id: str) -> None:
    """A request refused before admission (so it holds no lease) ends: its settle runs in the
    background, as in the gateway."""
    lifecycle = RequestLifecycle(runtime, request_id, key, "chat", "m", False)
    asyncio.ensure_future(lifecycle.close(429))


def runtime_for(store: PrivateRedis) -> GatewayRuntime:
    return GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(store.url()))


def flush(store: PrivateRedis) -> int:
    return usage.flush(redis.Redis.from_url(store.url()))


def test_usage_settled_while_redis_is_down_reaches_redis_once_it_is_back(store, cast):
    key = key_info(cast["alice"].key_id)
    counted_before = PROCESS_COUNTS.pending()  # this runtime, made without the lifespan, never flushes them

    async def scenario() -> None:
        runtime = runtime_for(store)
        try:
            finish(runtime, key, "req-before")
            await until_queued(store, "req-before")
            store.stop()
            finish(runtime, key, "req-during")

            async def kept() -> bool:
                return runtime.usage_outbox.waiting == 1

            await async_wait_for(kept, what="the failed settle to keep its usage")
            store.start()  # empty
            await until_queued(store, "req-during", "req-before")  # the latter lost in the restart
            assert runtime.usage_outbox.waiting == 0
        finally:
            await runtime.close()

    asyncio.run(scenario())
    assert sorted(queued(store)) == ["req-before", "req-during"]  # each once
    assert flush(store) == 2
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-before", "req-during"]
    books = counters(store)
    assert books[accounting.USAGE_RETRIED] == 1 and books[accounting.USAGE_REPUSHED] == 1
    # Both requests were counted in the process as they settled, Redis down or not; its counts
    # wait there for the next flush (process_counts.py).
    counted = PROCESS_COUNTS.pending()
    assert counted.get("req|interactive|429|chat", 0) - counted_before.get("req|interactive|429|chat", 0) == 2


def test_events_a_restarted_redis_lost_before_the_flush_are_pushed_again_and_written_once(store, cast):
    key = key_info(cast["bob"].key_id)

    async def scenario() -> None:
        runtime = runtime_for(store)
        try:
            finish(runtime, key, "req-a")
            await until_queued(store, "req-a")
            assert await sync_to_async(flush)(store) == 1  # req-a is in the database
            finish(runtime, key, "req-b")
            finish(runtime, key, "req-c")
            await until_queued(store, "req-b", "req-c")

            store.stop()
            store.start()  # empty, before the flush took req-b and req-c; no request comes
            await until_queued(store, "req-a", "req-b", "req-c")
            assert await sync_to_async(flush)(store) == 2  # req-a is not written twice

            finish(runtime, key, "req-d")  # and a later request is not the cue to push them again
            await until_queued(store, "req-d")
            assert queued(store) == ["req-d"]
            assert await sync_to_async(flush)(store) == 1
        finally:
            await runtime.close()

    asyncio.run(scenario())
    rows = list(UsageRecord.objects.order_by("request_id").values_list("request_id", flat=True))
    assert rows == ["req-a", "req-b", "req-c", "req-d"]
    assert counters(store)[accounting.USAGE_REPUSHED] == 3


def event(key_id: int, number: int) -> accounting.UsageEvent:
    return {
        "key_id": key_id, "tier": "batch", "request_id": f"req-{number}", "endpoint": "chat",
        "model": "m", "replica": "r1", "status": 200, "stream": False, "prompt_tokens": 1,
        "completion_tokens": 2, "queued_ms": 0, "ttft_ms": 5, "latency_ms": 9, "at": time.time(),
    }


def test_an_outbox_at_its_bound_drops_the_oldest_and_metrics_count_it(store, cast):
    carol = cast["carol"].key_id

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(store.url())
        lane = RedisLane.like(client)
        outbox = UsageOutbox(lane, max_events=3, backoff=(0.02, 0.1), idle_seconds=0.05)
        try:
            store.stop()
            for number in range(5):
                outbox.keep(event(carol, number))
            assert outbox.waiting == 3
            await asyncio.sleep(0)  # its first try fails
            store.start()
            await until_queued(store, "req-2", "req-3", "req-4")
        finally:
            await outbox.close()
            await lane.aclose()
            await client.aclose()

    asyncio.run(scenario())
    assert queued(store) == ["req-2", "req-3", "req-4"]
    books = counters(store)
    assert books[accounting.USAGE_OUTBOX_DROPPED] == 2 and books[accounting.USAGE_RETRIED] == 3
    # The requests' counters were the process's to count as they settled, not the outbox's.
    assert not any(field.startswith(("req|", "tok|")) for field in books)

    samples = Samples(asyncio.run(gateway_metrics.exposition()).decode())
    assert samples.get("gpuportal_usage_outbox_dropped_total") == 2
    assert samples.get("gpuportal_usage_outbox_retried_total") == 3
    assert samples.get("gpuportal_usage_outbox_waiting") == 0
    assert samples.get("gpuportal_usage_repushed_total") == 0
    assert samples.get("gpuportal_usage_events_dropped_total") == 0  # the backlog's books balance
    assert samples.get("gpuportal_usage_backlog") == 3



def test_a_fair_share_charge_whose_release_failed_is_charged_once_redis_is_back(store, cast):
    key = replace(key_info(cast["alice"].key_id), association="7", share=0.5)

    async def charged(runtime: GatewayRuntime) -> dict[str, float]:
        return (await runtime.admission.fair_share_usage())[0]

    async def scenario() -> dict[str, float]:
        runtime = runtime_for(store)
        try:
            await runtime.admission.set_capacity("m", 4)
            lifecycle = RequestLifecycle(runtime, "req-charged", key, "chat", "m", False)
            await lifecycle.admit(demand_of(key, "m"))
            store.stop()
            await lifecycle.close(200, StreamTally(prompt_tokens=10, completion_tokens=20, finished=True))

            async def kept() -> bool:
                return runtime.usage_outbox.waiting == 1

            await async_wait_for(kept, what="the failed release to keep its usage and charge")
            store.start()  # empty
            await until_queued(store, "req-charged")

            async def there() -> dict[str, float]:
                return await charged(runtime)

            return await async_wait_for(there, timeout=15, what="the charge to reach Redis")
        finally:
            await runtime.close()

    assert asyncio.run(scenario()) == {"7": pytest.approx(10 + 2 * 20)}


def test_a_release_whose_reply_was_lost_is_charged_once(store, cast):
    """Redis ran the release and the connection broke before its reply: the outbox sends it again,
    and the same Redis, seeing the lease released, charges nothing more."""
    key = replace(key_info(cast["alice"].key_id), association="7", share=0.5)

    async def scenario() -> dict[str, float]:
        runtime = runtime_for(store)
        try:
            await runtime.admission.set_capacity("m", 4)
            finish(runtime, key, "req-first")  # the outbox learns which Redis this is

            async def store_known() -> bool:
                return runtime.usage_outbox._boot is not None

            await async_wait_for(store_known, what="the outbox to read the store's boot id")
            lifecycle = RequestLifecycle(runtime, "req-charged", key, "chat", "m", False)
            await lifecycle.admit(demand_of(key, "m"))
            send, lost = runtime.admission._send, []

            async def reply_lost(*commands):
                replies = await send(*commands)
                if not lost:
                    lost.append(commands)
                    raise redis.exceptions.ConnectionError("connection lost before the reply")
                return replies

            runtime.admission._send = reply_lost
            await lifecycle.close(200, StreamTally(prompt_tokens=10, completion_tokens=20, finished=True))

            async def release_ran() -> bool:  # the settle runs in the background
                return bool(lost)

            await async_wait_for(release_ran, what="the release to run")
            assert lost[0][0][0] == "FCALL"  # the release ran; its reply was lost

            async def settled() -> bool:
                return runtime.usage_outbox.waiting == 0 and "req-charged" in queued(store)

            await async_wait_for(settled, timeout=15, what="the outbox to send the release again")
            return (await runtime.admission.fair_share_usage())[0]
        finally:
            await runtime.close()

    assert asyncio.run(scenario()) == {"7": pytest.approx(10 + 2 * 20, rel=1e-3)}  # once, not twice
    assert counters(store)[accounting.USAGE_RETRIED] == 1
    assert flush(store) == 2  # req-first and req-charged, one row each


def test_closing_lets_a_push_in_flight_finish_rather_than_push_it_twice(store, cast):
    """Redis has run the retry's push and its reply is on its way when the process shuts down:
    cancelled then, the push would count as failed, and the last try would push it again."""
    carol = cast["carol"].key_id

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(store.url())
        lane = RedisLane.like(client)
        outbox = UsageOutbox(lane, backoff=(0.02, 0.1), idle_seconds=0.05)
        ran, reply = asyncio.Event(), asyncio.Event()
        send = outbox._send

        async def reply_late(*commands):
            replies = await send(*commands)
            if any(command[0] == "RPUSH" for command in commands):
                ran.set()
                await reply.wait()
            return replies

        outbox._send = reply_late
        try:
            outbox.keep(event(carol, 1))
            await ran.wait()
            closing = asyncio.ensure_future(outbox.close())
            await asyncio.sleep(0)  # close() begins while the reply is still on its way
            reply.set()
            await closing
            assert outbox.waiting == 0
        finally:
            await lane.aclose()
            await client.aclose()

    asyncio.run(scenario())
    assert queued(store) == ["req-1"]
    assert counters(store)[accounting.USAGE_RETRIED] == 1
