"""POST /v1/messages (Anthropic's Messages API, as vLLM serves it) through a live gateway to a chat
replica, with the official anthropic SDK: answered whole and streamed, the key taken from
x-api-key or Authorization, charged from the answer's own usage, through the same caps, budgets
and usage records as a chat; every refusal in Anthropic's error shape, never a 500."""

from __future__ import annotations

import asyncio

import anthropic
import httpx
import pytest

from fairness.models import ApiKey, Budget
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.live_admission import peak_overlap
from tests.support.usage_records import recorded

HELLO = [{"role": "user", "content": "Say hello to the lab."}]
# About 100 tokens by enginesim's count: enough to be seen in the engine and in a budget.
PASSAGE = "the quick brown fox jumps over the lazy dog " * 9


def sdk(gateway, secret: str, **kwargs) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=secret, max_retries=0, **kwargs)


def post_messages(gateway, secret: str, body: dict | bytes, header: str = "x-api-key") -> httpx.Response:
    value = secret if header == "x-api-key" else f"Bearer {secret}"
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx.post(gateway.url + "/v1/messages", headers={header: value, "anthropic-version": "2023-06-01"},
                      timeout=30, **kwargs)


def assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    """The error body Anthropic's API sends: {"type": "error", "error": {"type", "message"}}."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind, body
    assert body["error"]["message"] and "Traceback" not in body["error"]["message"]
    assert response.headers["x-request-id"].startswith("req-")
    return str(body["error"]["message"])


def test_the_sdk_gets_a_whole_message_and_its_usage_is_charged(cast, gateway, replica):
    raw = sdk(gateway, cast["alice"].secret).messages.with_raw_response.create(
        model=MODEL, max_tokens=12, system="You are brief.", messages=HELLO)
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert 1 <= message.usage.output_tokens <= 12
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.model, row.replica, row.status) == ("messages", MODEL, "sim-a", 200)
    assert (row.prompt_tokens, row.completion_tokens) == (message.usage.input_tokens, message.usage.output_tokens)
    assert row.prompt_tokens > 5


def test_a_streamed_message_arrives_in_events_and_its_final_usage_is_charged(cast, gateway, replica):
    client = sdk(gateway, cast["bob"].secret)
    with client.messages.stream(model=MODEL, max_tokens=16, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    assert text and final.content[0].text == text
    row = recorded(request_id)
    assert (row.endpoint, row.status) == ("messages", 200)
    assert row.completion_tokens == final.usage.output_tokens >= 1
    assert row.prompt_tokens == final.usage.input_tokens > 5


def test_the_key_may_come_as_a_bearer_token_and_a_wrong_one_is_refused_in_anthropics_shape(cast, gateway, replica):
    bearer = anthropic.Anthropic(base_url=gateway.url, auth_token=cast["alice"].secret, max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=4, messages=HELLO).content
    body = {"model": MODEL, "max_tokens": 4, "messages": HELLO}
    assert post_messages(gateway, cast["alice"].secret, body, header="authorization").status_code == 200
    assert_anthropic_error(post_messages(gateway, "gp-" + "x" * 40, body), 401, "authentication_error")
    with pytest.raises(anthropic.AuthenticationError):
        sdk(gateway, "gp-not-a-key-of-anyones-at-all").messages.create(model=MODEL, max_tokens=4, messages=HELLO)


BAD = [
    ({"model": MODEL, "messages": HELLO}, "max_tokens"),
    ({"model": MODEL, "max_tokens": 0, "messages": HELLO}, "max_tokens"),
    ({"model": MODEL, "max_tokens": "8", "messages": HELLO}, "max_tokens"),
    ({"model": MODEL, "max_tokens": 8}, "messages"),
    ({"model": MODEL, "max_tokens": 8, "messages": []}, "messages"),
    ({"model": MODEL, "max_tokens": 8, "messages": ["hi"]}, "messages"),
    ({"model": MODEL, "max_tokens": 8, "messages": HELLO, "system": 3}, "system"),
    ({"model": MODEL, "max_tokens": 8, "messages": HELLO, "stream": "yes"}, "stream"),
    ({"model": MODEL, "max_tokens": 8, "messages": HELLO, "temperature": "hot"}, "temperature"),
    ({"max_tokens": 8, "messages": HELLO}, "model"),
]


def test_bad_input_gets_anthropics_error_shape_with_the_right_status(cast, gateway, replica, embedding_replica):
    alice = cast["alice"].secret
    for body, field in BAD:
        assert field in assert_anthropic_error(post_messages(gateway, alice, body), 400, "invalid_request_error"), body
    assert_anthropic_error(post_messages(gateway, alice, b"{not json"), 400, "invalid_request_error")
    missing = {"model": "nowhere", "max_tokens": 8, "messages": HELLO}
    assert_anthropic_error(post_messages(gateway, alice, missing), 404, "not_found_error")
    embedder = {"model": EMBEDDING_MODEL, "max_tokens": 8, "messages": HELLO}
    assert "/v1/embeddings" in assert_anthropic_error(post_messages(gateway, alice, embedder), 400,
                                                      "invalid_request_error")
    # Past the engine's context: the engine's own 400, said in the same shape.
    long = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "word " * 5000}]}
    assert_anthropic_error(post_messages(gateway, alice, long), 400, "invalid_request_error")
    with pytest.raises(anthropic.NotFoundError):
        sdk(gateway, alice).messages.create(model="nowhere", max_tokens=4, messages=HELLO)
    assert post_messages(gateway, alice, {"model": MODEL, "max_tokens": 4, "messages": HELLO}).status_code == 200


def test_a_persons_messages_queue_at_their_cap_like_chats(cast, gateway, replica, sim):
    alice = cast["alice"]  # interactive: two at a time
    sim.reset_peak()

    async def six() -> list[httpx.Response]:
        client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=alice.secret, max_retries=0)
        calls = [client.messages.with_raw_response.create(
            model=MODEL, max_tokens=24, messages=[{"role": "user", "content": PASSAGE}],
            metadata={"user_id": alice.username}) for _ in range(6)]
        return [raw.http_response for raw in await asyncio.gather(*calls)]

    answers = asyncio.run(six())
    assert [a.status_code for a in answers] == [200] * 6
    log = [e for e in sim.requests() if e["user"] == alice.username]
    assert len(log) == 6
    assert peak_overlap(log) == 2
    assert sum(int(a.headers["x-gpuportal-queued-ms"]) > 0 for a in answers) >= 3


def test_a_budget_counts_message_tokens_and_its_refusal_is_a_rate_limit_error(cast, gateway, replica):
    bob = cast["bob"]
    Budget.objects.create(key=ApiKey.objects.get(pk=bob.key_id), tokens=150, period=Budget.Period.DAY)
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": PASSAGE}]}
    answers = [post_messages(gateway, bob.secret, body) for _ in range(4)]
    assert answers[0].status_code == 200
    refused = next(a for a in answers if a.status_code != 200)  # ~110 tokens each: the second or third
    assert "its 150 tokens" in assert_anthropic_error(refused, 429, "rate_limit_error")
    assert int(refused.headers["retry-after"]) <= 86400
    with pytest.raises(anthropic.RateLimitError):
        sdk(gateway, bob.secret).messages.create(model=MODEL, max_tokens=8, messages=HELLO)


def test_count_tokens_counts_the_prompt_a_message_would_run_and_holds_no_slot(cast, gateway, replica):
    client = sdk(gateway, cast["alice"].secret)
    counted = client.messages.count_tokens(model=MODEL, system="You are brief.", messages=HELLO)
    ran = client.messages.create(model=MODEL, max_tokens=4, system="You are brief.", messages=HELLO)
    assert counted.input_tokens == ran.usage.input_tokens > 5
    raw = httpx.post(gateway.url + "/v1/messages/count_tokens", json={"model": MODEL}, timeout=30,
                     headers={"x-api-key": cast["alice"].secret})
    assert "messages" in assert_anthropic_error(raw, 400, "invalid_request_error")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nowhere", messages=HELLO)
