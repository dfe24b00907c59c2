"""Embeddings against real vLLM: the tiny model served by the pooling runner (`--runner pooling
--convert embed`), asked through the gateway with the official SDK, charged the prompt tokens the
engine counted; the chat model beside it refuses embeddings and the embedding model chats."""

import httpx
import openai
import pytest

from fairness.models import Replica
from tests.engine.conftest import EMBEDDING_MODEL_NAME
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.polling import wait_for
from tests.support.usage_records import recorded

TEXTS = ["Tell me about the weather in spring.", "Rain."]


@pytest.fixture
def embedding_replica(vllm_embedder, engine_replicas) -> Replica:
    return Replica.objects.create(name="vllm-embed", base_url=vllm_embedder.base_url, model=EMBEDDING_MODEL_NAME,
                                  max_num_seqs=8, model_kind=Replica.ModelKind.EMBEDDING)


def engine_count(server, text: str) -> int:
    """The prompt tokens the engine counts for one input (its own /tokenize)."""
    answer = httpx.post(server.base_url + "/tokenize", json={"model": EMBEDDING_MODEL_NAME, "prompt": text},
                        timeout=30)
    answer.raise_for_status()
    return int(answer.json()["count"])


def test_embeddings_are_answered_and_charged_the_engines_prompt_count(
    cast, engine_client, embedding_replica, vllm_embedder
):
    client = engine_client(cast["alice"])
    wait_for(lambda: client.embeddings.create(model=EMBEDDING_MODEL_NAME, input="warm"), timeout=30,
             what="the embedding replica")
    raw = client.embeddings.with_raw_response.create(model=EMBEDDING_MODEL_NAME, input=TEXTS)
    answer = raw.parse()  # the SDK asked for base64 and decoded it
    assert raw.headers["x-gpuportal-replica"] == "vllm-embed"
    assert [d.index for d in answer.data] == [0, 1]
    assert {len(d.embedding) for d in answer.data} == {128}  # the tiny model's hidden size
    counted = sum(engine_count(vllm_embedder, text) for text in TEXTS)
    assert answer.usage.prompt_tokens == counted

    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.status, row.prompt_tokens, row.completion_tokens) == ("embeddings", 200, counted, 0)


def test_each_kind_of_model_refuses_the_others_endpoint(cast, engine_client, embedding_replica):
    client = engine_client(cast["alice"])
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model=EMBEDDING_MODEL_NAME, messages=[{"role": "user", "content": "hi"}])
    assert chat.value.code == "wrong_model_kind"
    with pytest.raises(openai.BadRequestError) as embedding:
        client.embeddings.create(model=TINY, input="hi")
    assert embedding.value.code == "wrong_model_kind"
