"""Behind Redis Sentinel, a promoted replica has its old master's store boot id but perhaps not
its latest usage events (replication is asynchronous): a gateway that reaches a new master pushes
its recent events again, and the flush still writes one row per request."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis

from fairness.accounting import usage
from fairness.gateway.lifecycle import RequestLifecycle
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings
from fairness.models import UsageRecord
from fairness.store import keyspace, redis_sentinel
from tests.support.polling import async_wait_for
from tests.support.sentinel_redis import MASTER_NAME
from tests.usage.test_usage_outbox import key_info

pytestmark = pytest.mark.django_db(transaction=True)


def queued(port: int) -> list[str]:
    with redis.Redis(port=port) as client:
        return [json.loads(raw)["request_id"] for raw in client.lrange(keyspace.USAGE_EVENTS, 0, -1)]


def test_events_a_promoted_replica_lacks_are_pushed_again_and_written_once(sentinels, cast):
    key = key_info(cast["bob"].key_id)

    async def until_queued(*request_ids: str) -> None:
        async def there() -> bool:
            return set(request_ids) <= set(queued(sentinels.master))

        await async_wait_for(there, timeout=15, what=f"{request_ids} to reach Redis")

    def finish(runtime: GatewayRuntime, request_id: str) -> None:
        asyncio.ensure_future(RequestLifecycle(runtime, request_id, key, "chat", "m", False).close(429))

    async def scenario() -> None:
        client = redis_sentinel.async_master("redis://127.0.0.1:1/0", sentinels.addresses, MASTER_NAME)
        runtime = GatewayRuntime(RuntimeSettings.from_django(), client)
        try:
            finish(runtime, "req-a")
            finish(runtime, "req-b")
            await until_queued("req-a", "req-b")
            new = await asyncio.to_thread(sentinels.remonitor)
            # req-b never reached the replica before its master went.
            redis.Redis(port=new).lrem(keyspace.USAGE_EVENTS, 0, next(
                raw for raw in redis.Redis(port=new).lrange(keyspace.USAGE_EVENTS, 0, -1)
                if json.loads(raw)["request_id"] == "req-b"))
            finish(runtime, "req-c")  # over the old connection: READONLY, then the new master
            await until_queued("req-a", "req-b", "req-c")
        finally:
            await runtime.close()

    asyncio.run(scenario())
    assert queued(sentinels.master).count("req-b") == 1  # lost with the old master, pushed again
    usage.flush(redis.Redis(port=sentinels.master))
    ours = ["req-a", "req-b", "req-c"]
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ours  # each once
