import asyncio
import time

import pytest
import redis.asyncio

from fairness.gateway import accounting
from fairness.models import ApiKey, UsageRecord
from fairness.store import keyspace
from fairness.telemetry import usage

pytestmark = pytest.mark.django_db(transaction=True)


def event(key_id: int, **overrides) -> accounting.UsageEvent:
    base: accounting.UsageEvent = {
        "key_id": key_id, "request_id": "req-1", "endpoint": "chat", "model": "m", "replica": "r1",
        "status": 200, "stream": True, "prompt_tokens": 12, "completion_tokens": 34, "queued_ms": 5,
        "ttft_ms": 40, "latency_ms": 300, "at": time.time(),
    }
    return {**base, **overrides}


def push(redis_url: str, *events: accounting.UsageEvent) -> None:
    async def go():
        client = redis.asyncio.Redis.from_url(redis_url)
        pipe = client.pipeline(transaction=False)
        for item in events:
            pipe.execute_command(*accounting.usage_record(item))
        await pipe.execute()
        await client.aclose()

    asyncio.run(go())


def test_it_moves_events_into_the_database_and_marks_keys_used(cast, redis_client, redis_url):
    alice = cast["alice"]
    push(redis_url, event(alice.key_id), event(alice.key_id, request_id="req-2", completion_tokens=1))
    assert usage.flush(redis_client) == 2
    rows = UsageRecord.objects.order_by("request_id")
    assert [(r.request_id, r.completion_tokens) for r in rows] == [("req-1", 34), ("req-2", 1)]
    assert ApiKey.objects.get(pk=alice.key_id).last_used_at is not None
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 0
    assert usage.flush(redis_client) == 0


def test_it_drops_events_of_deleted_keys_without_losing_the_rest(cast, redis_client, redis_url):
    push(redis_url, event(cast["bob"].key_id), event(999_999))
    assert usage.flush(redis_client) == 1
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 0


def test_a_second_flusher_waits_its_turn(cast, redis_client, redis_url):
    push(redis_url, event(cast["carol"].key_id))
    with redis_client.lock(keyspace.USAGE_FLUSH_LOCK, timeout=5):
        assert usage.flush(redis_client) == 0
    assert usage.flush(redis_client) == 1


def test_flushed_records_roll_up_per_key_and_hour(cast, redis_client, redis_url):
    from fairness.models import UsageHourly
    from fairness.telemetry import usage_rollup

    alice = cast["alice"]
    at = time.time()
    push(redis_url, event(alice.key_id, queued_ms=0, at=at),
         event(alice.key_id, request_id="req-2", queued_ms=700, at=at),
         event(alice.key_id, request_id="req-3", status=502, queued_ms=40, at=at))
    usage.flush(redis_client)
    push(redis_url, event(alice.key_id, request_id="req-4", queued_ms=20000, at=at))
    usage.flush(redis_client)
    row = UsageHourly.objects.get(key_id=alice.key_id)
    assert (row.requests, row.errors, row.completion_tokens) == (4, 1, 4 * 34)
    figures = usage_rollup.summary([row])
    assert figures["queue_wait_p50_ms"] == 50 and figures["queue_wait_p95_ms"] == 30000


def test_an_event_pushed_again_is_written_and_rolled_up_once(cast, redis_client, redis_url):
    from fairness.models import UsageHourly

    bob = cast["bob"].key_id
    push(redis_url, event(bob), event(bob), event(bob, request_id="req-2"))  # twice in one batch
    assert usage.flush(redis_client) == 2
    push(redis_url, event(bob), event(bob, request_id="req-3"))  # again after it was written
    assert usage.flush(redis_client) == 1
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-1", "req-2", "req-3"]
    assert UsageHourly.objects.get(key_id=bob).requests == 3
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 0
