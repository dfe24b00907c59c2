"""A batch's lines answer to its key's limits as a live request does: the runner sends them
through the same views, so a budget used up is the same 429, and the line waits for its window
instead of failing."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio

from fairness.batch import line_runner
from fairness.gateway.api_keys import load_by_id
from fairness.gateway.runtime import GatewayRuntime, RuntimeSettings
from fairness.models import ApiKey, Budget
from tests.support.cast import MODEL

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"


def test_a_line_over_its_key_s_budget_waits_for_the_budget_s_window(cast, replica, redis_url):
    # A budget with room for no answer at all: a live request gets 429 budget_exceeded (budgets
    # lower a request's completion limit to what is left, and refuse only below a small answer).
    key = ApiKey.objects.get(pk=cast["carol"].key_id)
    Budget.objects.create(key=key, tokens=1, period=Budget.Period.DAY)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "a line"}], "max_tokens": 8})

    async def one_line() -> line_runner.Answer:
        runtime = GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(redis_url))
        await runtime.start()
        try:
            info = await load_by_id(key.pk)
            assert info is not None
            return await line_runner.send(runtime, info, CHAT, body, "batch-limit-1")
        finally:
            await runtime.close()

    answer = asyncio.run(one_line())
    assert (answer.status, answer.code) == (429, "budget_exceeded"), answer.body
    assert answer.passing(tries=1), "a line over its budget must wait, not fail"
    assert answer.retry_after is not None and 0 < answer.retry_after <= 24 * 3600


def test_a_line_waits_in_the_queue_no_longer_than_its_batchs_window(cast, gateway, sim, replica, redis_url):
    import socket
    import time

    from fairness.models import Replica
    from fairness.scheduling.live_counts import person_load
    from fairness.store.redis_clients import redis_sync
    from tests.support.polling import wait_for
    from tests.support.v1_calls import hanging_chat

    Replica.objects.filter(pk=replica.pk).update(max_num_seqs=1)
    key = ApiKey.objects.get(pk=cast["carol"].key_id)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "a line"}], "max_tokens": 8})
    sim.set_faults(stall=True)
    alice = cast["alice"]
    held = hanging_chat(gateway, alice.secret)  # the one slot, for as long as the test needs it
    try:
        wait_for(lambda: person_load(redis_sync()).get((alice.user_id, alice.tier), (0, 0))[0] == 1, what="slot taken")

        async def one_line() -> line_runner.Answer:
            runtime = GatewayRuntime(RuntimeSettings.from_django(), redis.asyncio.Redis.from_url(redis_url))
            await runtime.start()
            try:
                info = await load_by_id(key.pk)
                assert info is not None
                # The batch tier lets a request wait an hour; the line's batch has 1.5 s left.
                return await line_runner.send(runtime, info, CHAT, body, "batch-window-1", wait_until=time.time() + 1.5)
            finally:
                await runtime.close()

        answer = asyncio.run(asyncio.wait_for(one_line(), 30))
    finally:
        sim.set_faults(stall=False)
        held.shutdown(socket.SHUT_RDWR)
        held.close()
    assert (answer.status, answer.code) == (429, "queue_timeout"), answer.body
    assert answer.passing(tries=1)  # the runner decides what an expired batch's lines become
