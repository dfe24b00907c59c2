"""Anthropic's Messages API against real vLLM (it serves /v1/messages for a chat model), asked
through the gateway with the official anthropic SDK, whole and streamed: the answer is vLLM's,
and the usage row holds the prompt the engine ran (Anthropic's input_tokens leave out the cached
part; the row counts it) and the tokens it wrote."""

import anthropic
import httpx

from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.usage_records import recorded

HELLO = [{"role": "user", "content": "Tell me about the weather in spring."}]


def client_for(gateway, member) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=member.secret, max_retries=0, timeout=120)


def ran(usage) -> int:
    """The prompt tokens the engine ran, from Anthropic's usage fields."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)


def test_a_whole_and_a_streamed_message_are_answered_and_charged_what_the_engine_ran(cast, gateway, engine_replicas):
    client = client_for(gateway, cast["alice"])
    raw = client.messages.with_raw_response.create(model=TINY, max_tokens=8, messages=HELLO)
    message = raw.parse()
    assert message.type == "message" and message.content and message.usage.output_tokens >= 1
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.status) == ("messages", 200)
    assert row.replica in ("vllm-fcfs", "vllm-priority")
    assert (row.prompt_tokens, row.completion_tokens) == (ran(message.usage), message.usage.output_tokens)
    assert row.prompt_tokens > 5

    with client.messages.stream(model=TINY, max_tokens=8, messages=HELLO) as stream:
        for _ in stream.text_stream:
            pass
        final = stream.get_final_message()
        request_id = stream.response.headers["x-request-id"]
    row = recorded(request_id)
    assert (row.endpoint, row.status) == ("messages", 200)
    assert (row.prompt_tokens, row.completion_tokens) == (ran(final.usage), final.usage.output_tokens)
    assert row.prompt_tokens == ran(message.usage)  # the same prompt, counted alike
    assert client.messages.count_tokens(model=TINY, messages=HELLO).input_tokens == row.prompt_tokens


def test_the_engines_own_refusal_comes_back_in_anthropics_shape(cast, gateway, engine_replicas):
    too_long = {"model": TINY, "max_tokens": 100_000, "messages": HELLO}
    answer = httpx.post(gateway.url + "/v1/messages", json=too_long, timeout=120,
                        headers={"x-api-key": cast["alice"].secret, "anthropic-version": "2023-06-01"})
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert body["error"]["message"]
