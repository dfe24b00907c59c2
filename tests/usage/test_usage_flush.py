import asyncio
import json
import time

import pytest
import redis.asyncio

from fairness.accounting import usage
from fairness.gateway import accounting
from fairness.models import ApiKey, UsageRecord
from fairness.store import keyspace
from fairness.telemetry import gateway_metrics
from tests.support.metrics import Samples

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
    from fairness.accounting import usage_rollup
    from fairness.models import UsageHourly

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


def test_events_that_cannot_be_written_are_set_aside_and_the_rest_are_written(cast, redis_client, redis_url):
    """One bad event must not fail every flush it sits in: the records behind it would never be
    written, and the backlog would fill until events were dropped."""
    alice = cast["alice"]
    push(redis_url, event(alice.key_id, request_id="good-1"),
         event(alice.key_id, request_id="refused", prompt_tokens="many"),  # no column takes it
         event(alice.key_id, request_id="negative", completion_tokens=-3),  # the database's check refuses it
         event(alice.key_id, request_id="good-2"))
    redis_client.rpush(keyspace.USAGE_EVENTS, b"not json", b"[1, 2]", b'{"request_id": "no-fields"}')
    push(redis_url, event(alice.key_id, request_id="good-3"))

    assert usage.flush(redis_client) == 3
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["good-1", "good-2", "good-3"]
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 0
    aside = redis_client.lrange(keyspace.USAGE_REJECTED, 0, -1)
    assert sorted(aside[:3]) == sorted([b"not json", b"[1, 2]", b'{"request_id": "no-fields"}'])
    assert sorted(json.loads(item)["request_id"] for item in aside[3:]) == ["negative", "refused"]
    counters = redis_client.hgetall(keyspace.GATEWAY_COUNTERS)
    assert int(counters[accounting.USAGE_REJECTED.encode()]) == 5
    assert int(counters[accounting.USAGE_DRAINED.encode()]) == 8  # the books still balance
    samples = Samples(asyncio.run(gateway_metrics.exposition()).decode())
    assert samples.get("gpuportal_usage_events_rejected_total") == 5
    assert samples.get("gpuportal_usage_events_dropped_total") == 0


def test_a_database_that_is_away_keeps_every_event_for_the_next_flush(cast, redis_client, redis_url, monkeypatch):
    from django.db import OperationalError

    push(redis_url, event(cast["alice"].key_id))

    def away(*args, **kwargs):
        raise OperationalError("the database is away")

    with monkeypatch.context() as patched:
        patched.setattr(UsageRecord.objects, "bulk_create", away)
        with pytest.raises(OperationalError):
            usage.flush(redis_client)
    assert redis_client.llen(keyspace.USAGE_EVENTS) == 1 and not redis_client.exists(keyspace.USAGE_REJECTED)
    assert usage.flush(redis_client) == 1


def test_the_wait_estimate_a_request_queued_with_is_kept_beside_its_real_wait(cast, redis_client, redis_url):
    alice = cast["alice"]
    push(redis_url, event(alice.key_id, request_id="q", queued_ms=2400, queue_estimate_ms=2000),
         event(alice.key_id, request_id="at-once"),  # never queued: no estimate
         event(alice.key_id, request_id="odd", queue_estimate_ms=-5),  # hostile: kept out, the row kept
         event(alice.key_id, request_id="odd-2", queue_estimate_ms="soon"))
    assert usage.flush(redis_client) == 4
    rows = {r.request_id: (r.queued_ms, r.queue_estimate_ms) for r in UsageRecord.objects.all()}
    assert rows == {"q": (2400, 2000), "at-once": (5, None), "odd": (5, None), "odd-2": (5, None)}


def test_what_held_a_request_how_it_ended_and_its_refusal_are_kept_for_the_request_log(
    cast, redis_client, redis_url
):
    alice = cast["alice"]
    push(redis_url, event(alice.key_id, held_by="person_cap", ended="done"),
         event(alice.key_id, request_id="req-2", status=429, replica="", held_by="no_slot", ended="refused",
               refusal="queue_timeout"),
         event(alice.key_id, request_id="req-3"))  # from a gateway before the request log: blank
    assert usage.flush(redis_client) == 3
    rows = UsageRecord.objects.order_by("request_id")
    assert [(r.held_by, r.ended, r.refusal) for r in rows] == [
        ("person_cap", "done", ""), ("no_slot", "refused", "queue_timeout"), ("", "", "")]
