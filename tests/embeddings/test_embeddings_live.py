"""/v1/embeddings through a live gateway to an embedding replica (enginesim as a pooling model),
with the official openai SDK: answered and charged as prompt tokens, through the same caps,
budgets and usage records as a chat; a chat model and an embedding model each refuse the other's
endpoint in words; bad input gets OpenAI's 400, never a 500."""

from __future__ import annotations

import asyncio
import base64
import struct

import httpx
import openai
import pytest

from enginesim.process import EngineSimProcess
from fairness.models import ApiKey, Budget, Replica
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.live_admission import peak_overlap
from tests.support.polling import wait_for
from tests.support.usage_records import recorded
from tests.support.v1_calls import CHAT, assert_error, post

EMBEDDER = EMBEDDING_MODEL
SIZE = 128  # enginesim's --embedding-size default
# About 100 tokens by enginesim's count (four bytes a token): long enough to be seen in the engine.
PASSAGE = "the quick brown fox jumps over the lazy dog " * 9


@pytest.fixture
def embedder(embedding_sim: EngineSimProcess, embedding_replica) -> EngineSimProcess:
    return embedding_sim


def client_for(gateway, member) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=member.secret, max_retries=0)


def embed(gateway, member, body: dict, **kwargs) -> httpx.Response:
    return post(gateway, member.secret, body, path="/v1/embeddings", **kwargs)


def test_the_sdk_gets_one_vector_per_input_in_order_and_the_engines_count(cast, gateway, embedder):
    client = client_for(gateway, cast["alice"])
    wait_for(lambda: embed(gateway, cast["alice"], {"model": EMBEDDER, "input": "x"}).status_code == 200,
             what="the embedding replica")
    answer = client.embeddings.create(model=EMBEDDER, input=["first passage", PASSAGE, [5, 6, 7]])
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert all(len(d.embedding) == SIZE for d in answer.data)
    assert answer.data[0].embedding != answer.data[1].embedding
    again = client.embeddings.create(model=EMBEDDER, input="first passage", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(answer.data[0].embedding, rel=1e-6)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 25
    short = client.embeddings.create(model=EMBEDDER, input="first passage", dimensions=8)
    assert len(short.data[0].embedding) == 8

    # The plain HTTP answer, base64 as the SDK asks by default: floats packed little-endian.
    raw = embed(gateway, cast["alice"], {"model": EMBEDDER, "input": "first passage", "encoding_format": "base64"})
    packed = base64.b64decode(raw.json()["data"][0]["embedding"])
    assert struct.unpack(f"<{SIZE}f", packed) == pytest.approx(answer.data[0].embedding, rel=1e-5)


def test_its_usage_record_names_the_endpoint_and_charges_the_prompt_only(cast, gateway, embedder):
    client = client_for(gateway, cast["bob"])
    wait_for(lambda: embed(gateway, cast["bob"], {"model": EMBEDDER, "input": "warm"}).status_code == 200,
             what="the embedding replica")
    raw = client.embeddings.with_raw_response.create(model=EMBEDDER, input=[PASSAGE, "two"])
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.model, row.replica, row.status) == ("embeddings", EMBEDDER, "embed-a", 200)
    assert row.prompt_tokens == raw.parse().usage.prompt_tokens > 25
    assert row.completion_tokens == 0


def test_a_chat_model_and_an_embedding_model_each_refuse_the_others_endpoint(cast, gateway, embedder, openai_for):
    alice = cast["alice"]
    wait_for(lambda: embed(gateway, alice, {"model": EMBEDDER, "input": "x"}).status_code == 200,
             what="the embedding replica")
    embedder.reset_peak()
    error = assert_error(post(gateway, alice.secret, {**CHAT, "model": EMBEDDER}), 400, "wrong_model_kind")
    assert error["param"] == "model" and EMBEDDER in error["message"] and "/v1/embeddings" in error["message"]
    completions = {"model": EMBEDDER, "prompt": "hi", "max_tokens": 4}
    assert_error(post(gateway, alice.secret, completions, path="/v1/completions"), 400, "wrong_model_kind")
    with pytest.raises(openai.BadRequestError) as refused:
        openai_for(alice).embeddings.create(model=MODEL, input="hi")
    assert refused.value.code == "wrong_model_kind" and "/v1/chat/completions" in refused.value.message
    assert embedder.requests() == []  # refused before it queued: nothing reached the engine
    assert_error(embed(gateway, alice, {"model": "nowhere", "input": "x"}), 404, "model_not_found")


BAD = [
    ({"model": EMBEDDER}, "input", "missing_required_parameter"),
    ({"model": EMBEDDER, "input": None}, "input", "missing_required_parameter"),
    ({"model": EMBEDDER, "input": []}, "input", "invalid_type"),
    ({"model": EMBEDDER, "input": {"text": "x"}}, "input", "invalid_type"),
    ({"model": EMBEDDER, "input": ""}, "input", "invalid_value"),
    ({"model": EMBEDDER, "input": ["a", ""]}, "input", "invalid_value"),
    ({"model": EMBEDDER, "input": ["a", 3]}, "input", "invalid_type"),
    ({"model": EMBEDDER, "input": [[1, -2]]}, "input", "invalid_type"),
    ({"model": EMBEDDER, "input": [[1, True]]}, "input", "invalid_type"),
    ({"model": EMBEDDER, "input": ["x"] * 2049}, "input", "unsupported_value"),
    ({"model": EMBEDDER, "input": "x", "encoding_format": "hex"}, "encoding_format", "invalid_value"),
    ({"model": EMBEDDER, "input": "x", "dimensions": 0}, "dimensions", "invalid_type"),
    ({"model": EMBEDDER, "input": "x", "dimensions": "8"}, "dimensions", "invalid_type"),
    ({"model": EMBEDDER, "input": "x", "stream": True}, "stream", "unsupported_value"),
    ({"model": EMBEDDER, "input": "x", "user": 7}, "user", "invalid_type"),
    ({"input": "x"}, "model", "missing_required_parameter"),
]


def test_bad_embedding_bodies_get_openai_shaped_400s_naming_the_field(cast, gateway, embedder):
    alice = cast["alice"]
    for body, param, code in BAD:
        error = assert_error(embed(gateway, alice, body), 400, code)
        assert error["param"] == param, body
    assert_error(embed(gateway, alice, b"{not json"), 400, "invalid_json")
    assert_error(embed(gateway, alice, b"[1, 2]"), 400, "invalid_json")
    # An input the engine itself refuses (past its context) comes back as the engine's 400, not a 5xx.
    long = embed(gateway, alice, {"model": EMBEDDER, "input": "word " * 5000})
    assert_error(long, 400)
    assert embed(gateway, alice, {"model": EMBEDDER, "input": "fine"}).status_code == 200


def test_a_persons_embeddings_queue_at_their_cap_like_chats(cast, gateway, embedder):
    alice = cast["alice"]  # interactive: two at a time
    wait_for(lambda: embed(gateway, alice, {"model": EMBEDDER, "input": "x"}).status_code == 200,
             what="the embedding replica")
    embedder.reset_peak()

    async def six() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"model": EMBEDDER, "input": PASSAGE, "user": alice.username}
            return await asyncio.gather(*(
                client.post(gateway.url + "/v1/embeddings", json=body,
                            headers={"authorization": f"Bearer {alice.secret}"})
                for _ in range(6)))

    answers = asyncio.run(six())
    assert [a.status_code for a in answers] == [200] * 6
    log = [e for e in embedder.requests() if e["user"] == alice.username]
    assert len(log) == 6
    assert peak_overlap(log) == 2
    assert sum(int(a.headers["x-gpuportal-queued-ms"]) > 0 for a in answers) >= 3


def test_a_budget_counts_embedding_tokens(cast, gateway, embedder):
    bob = cast["bob"]
    body = {"model": EMBEDDER, "input": PASSAGE}
    wait_for(lambda: embed(gateway, bob, body).status_code == 200, what="the embedding replica")
    Budget.objects.create(key=ApiKey.objects.get(pk=bob.key_id), tokens=150, period=Budget.Period.DAY)
    # Each answer charges about 100 prompt tokens: a request or two, and the day's 150 are spent.
    refused = wait_for(lambda: (r := embed(gateway, bob, body)).status_code == 429 and r, what="the refusal")
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert int(refused.headers["retry-after"]) <= 86400
    assert post(gateway, cast["alice"].secret, CHAT).status_code == 200  # alice's own budget is untouched


def test_models_say_what_kind_each_model_is_when_it_came_and_the_context_its_engine_states(cast, gateway, embedder):
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}

    def cards() -> dict[str, dict] | None:
        listed = httpx.get(gateway.url + "/v1/models", headers=headers, timeout=30).json()["data"]
        found = {card["id"]: card for card in listed}
        return found if len(found) == 2 and all("max_model_len" in c for c in found.values()) else None

    found = wait_for(cards, what="both models, with the context their engines state")
    assert {name: card["kind"] for name, card in found.items()} == {MODEL: "chat", EMBEDDER: "embedding"}
    assert {card["max_model_len"] for card in found.values()} == {4096}  # enginesim's default
    one = httpx.get(gateway.url + f"/v1/models/{EMBEDDER}", headers=headers, timeout=30).json()
    assert one == found[EMBEDDER]
    # `created`: when the model's first replica was added.
    added = {r.model: int(r.created_at.timestamp()) for r in Replica.objects.all()}
    assert {name: card["created"] for name, card in found.items()} == added
    assert all(card["created"] > 1_700_000_000 for card in found.values())
