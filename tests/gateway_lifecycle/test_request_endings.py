"""How each request ended, as its usage record (the request log) tells it: done, the client gone,
an engine error, refused by admission, or cut off at shutdown; and what held it when it waited."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.accounting import usage
from fairness.actions.keys import issue_key
from fairness.models import ApiKey, Replica, Tier, UsageRecord
from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL, Member
from tests.support.live_admission import chat_body
from tests.support.polling import async_wait_for, wait_for
from tests.support.processes import start_gateway
from tests.support.usage_records import recorded

STEP_MS = 100  # one token every 0.1 s: a stream of 600 tokens runs a minute
POISON = "POISON-7d2a"  # the engine answers 500 to a body holding it


@pytest.fixture
def slow_card(tiers) -> Iterator[EngineSimProcess]:
    """The model's only replica: 4 slots, streams of known length, 500 for a poisoned body."""
    engine = start_enginesim(model=MODEL, max_num_seqs=4, extra_args=[
        "--step-base-ms", str(STEP_MS), "--step-per-seq-ms", "0", "--error-500-marker", POISON])
    Replica.objects.create(name="slow-4", base_url=engine.url, model=MODEL, max_num_seqs=4)
    yield engine
    engine.stop()


def post(url: str, member: Member, **body: object) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=chat_body(member, **body),  # type: ignore[arg-type]
                      headers={"authorization": f"Bearer {member.secret}"}, timeout=30)


def test_an_answered_request_ended_done_and_never_waited(gateway, slow_card, cast):
    response = post(gateway.url, cast["alice"], max_tokens=2)
    assert response.status_code == 200
    row = recorded(response.headers["x-request-id"])
    assert (row.ended, row.held_by, row.refusal, row.status) == ("done", "", "", 200)


def test_an_engine_failure_ended_engine_error(gateway, slow_card, cast):
    response = post(gateway.url, cast["alice"], max_tokens=2, messages=[{"role": "user", "content": POISON}])
    assert response.status_code == 502
    row = recorded(response.headers["x-request-id"])
    assert (row.ended, row.status, row.replica) == ("engine_error", 502, "slow-4")


def test_a_rate_limited_request_was_refused_with_its_code(gateway, slow_card, cast):
    ApiKey.objects.filter(pk=cast["bob"].key_id).update(requests_per_minute=1)
    assert post(gateway.url, cast["bob"], max_tokens=1).status_code == 200
    refused = post(gateway.url, cast["bob"], max_tokens=1)
    assert refused.status_code == 429
    row = recorded(refused.headers["x-request-id"])
    assert (row.ended, row.refusal, row.status, row.replica) == ("refused", "rate_limited", 429, "")


def test_a_client_that_left_mid_stream_ended_client_gone(gateway, slow_card, cast):
    async def leave_after_the_first_chunk() -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            body = chat_body(cast["alice"], max_tokens=600, stream=True)
            headers = {"authorization": f"Bearer {cast['alice'].secret}"}
            async with client.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                                     headers=headers) as response:
                async for chunk in response.aiter_bytes():
                    if b'"content"' in chunk:
                        return response.headers["x-request-id"]
        raise AssertionError("the stream sent no content")

    row = recorded(asyncio.run(leave_after_the_first_chunk()))
    assert (row.ended, row.status) == ("client_gone", 499)
    assert row.latency_ms < 600 * STEP_MS  # it did not run to its end


def test_requests_cut_off_at_shutdown_ended_shutdown_and_say_what_held_the_queued(
    live_db_url, redis_url, slow_card, tiers
):
    # dave fills the card, then waits behind his own cap; erin waits first in line for a slot.
    wide = Tier.objects.create(name="wide", per_key_concurrency=4, max_queued_per_key=8)
    members = {}
    for name in ("dave", "erin"):
        user = get_user_model().objects.create(username=name)
        key, secret = issue_key(user, wide)
        members[name] = Member(name, wide.name, secret, key.pk, key.owner_id)
    leaving = start_gateway(live_db_url, name="request-endings", GP_SHUTDOWN_GRACE_SECONDS="1")
    client = redis.Redis.from_url(redis_url)

    def load(member: Member) -> tuple[int, int]:
        return person_load(client).get((member.user_id, member.tier), (0, 0))

    async def stream(http: httpx.AsyncClient, member: Member) -> int:
        body = chat_body(member, max_tokens=600, stream=True)
        headers = {"authorization": f"Bearer {member.secret}"}
        async with http.stream("POST", leaving.url + "/v1/chat/completions", json=body, headers=headers) as response:
            async for _ in response.aiter_bytes():
                pass
            return response.status_code

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            tasks = [asyncio.create_task(stream(http, members["dave"])) for _ in range(4)]
            await async_wait_for(lambda: asyncio.to_thread(lambda: load(members["dave"]) == (4, 0)),
                                 timeout=10, what="dave's four streams running")
            tasks.append(asyncio.create_task(stream(http, members["dave"])))
            await async_wait_for(lambda: asyncio.to_thread(lambda: load(members["dave"]) == (4, 1)),
                                 timeout=10, what="dave's fifth queued")
            tasks.append(asyncio.create_task(stream(http, members["erin"])))
            await async_wait_for(lambda: asyncio.to_thread(lambda: load(members["erin"]) == (0, 1)),
                                 timeout=10, what="erin's queued")
            leaving.terminate()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)

    try:
        asyncio.run(scenario())
        leaving.wait_exit(timeout=10)
    finally:
        leaving.stop()
        client.close()

    def all_six() -> list[UsageRecord] | None:
        usage.flush(redis_sync())
        rows = list(UsageRecord.objects.filter(key__tier=wide).order_by("created_at"))
        return rows if len(rows) == 6 else None

    rows = wait_for(all_six, timeout=20, what="the six requests' records")
    assert {row.ended for row in rows} == {"shutdown"}
    dave_id, erin_id = members["dave"].key_id, members["erin"].key_id
    assert sorted(row.held_by for row in rows if row.key_id == dave_id) == ["", "", "", "", "person_cap"]
    assert [row.held_by for row in rows if row.key_id == erin_id] == ["no_slot"]
