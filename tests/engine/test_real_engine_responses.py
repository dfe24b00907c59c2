"""The Responses API against real vLLM (run with VLLM_ENABLE_RESPONSES_API_STORE=1, so it keeps
what it answered), through the gateway with the official openai SDK, over the tier's two
replicas: every turn of a conversation (previous_response_id) runs on the replica that stored the
last one, whole or streamed, each charged the usage vLLM reports; the response is reached with GET
by its maker only."""

import openai
import pytest

from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.usage_records import recorded


def test_a_conversation_stays_on_the_replica_that_stored_it_and_each_turn_is_charged(
    cast, engine_client, engine_replicas
):
    client = engine_client(cast["alice"])
    raw = client.responses.with_raw_response.create(model=TINY, input="Tell me about spring.", max_output_tokens=8)
    home = raw.headers["x-gpuportal-replica"]
    last = raw.parse()
    assert last.status in ("completed", "incomplete") and last.usage.output_tokens >= 1
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.replica, row.prompt_tokens, row.completion_tokens) == (
        "responses", home, last.usage.input_tokens, last.usage.output_tokens)

    for turn in range(4):
        ask = dict(model=TINY, input=f"And then {turn}?", max_output_tokens=8, previous_response_id=last.id)
        if turn % 2:
            raw = client.responses.with_raw_response.create(**ask, stream=True)
            answer = next(e for e in raw.parse() if e.type == "response.completed").response
        else:
            raw = client.responses.with_raw_response.create(**ask)
            answer = raw.parse()
        assert raw.headers["x-gpuportal-replica"] == home
        assert answer.usage.input_tokens > last.usage.input_tokens  # vLLM carried the conversation on
        row = recorded(raw.headers["x-request-id"])
        assert (row.prompt_tokens, row.completion_tokens) == (answer.usage.input_tokens, answer.usage.output_tokens)
        last = answer

    assert client.responses.retrieve(last.id).id == last.id
    with pytest.raises(openai.NotFoundError):
        engine_client(cast["bob"]).responses.retrieve(last.id)
