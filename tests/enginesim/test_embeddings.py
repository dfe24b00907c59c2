"""enginesim as a pooling model (`--runner pooling`): /v1/embeddings as vLLM answers it, and no
generation routes; in timed mode an embedding takes a slot for its prefill."""

from __future__ import annotations

import array
import base64
from collections.abc import Iterator

import httpx
import openai
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import MODEL, chat_body, launch


@pytest.fixture(scope="module")
def embedder() -> Iterator[EngineSimProcess]:
    with launch(4, "--runner", "pooling", "--speed", "10", "--max-model-len", "64") as handle:
        yield handle


def embed(sim: EngineSimProcess, body: dict) -> httpx.Response:
    return httpx.post(f"{sim.url}/v1/embeddings", json={"model": MODEL, **body}, timeout=30)


def test_one_unit_vector_per_input_the_same_for_the_same_text(embedder):
    answer = embed(embedder, {"input": ["spring rain", "autumn", "spring rain", [1, 2, 3]]}).json()
    vectors = [d["embedding"] for d in answer["data"]]
    assert [d["index"] for d in answer["data"]] == [0, 1, 2, 3]
    assert {len(v) for v in vectors} == {128}
    assert vectors[0] == vectors[2] != vectors[1]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-9 for v in vectors)
    # Four bytes a token: 3 + 2 + 3 for the texts, one a token id.
    assert answer["usage"] == {"prompt_tokens": 11, "total_tokens": 11}
    assert (answer["object"], answer["model"]) == ("list", MODEL) and answer["id"].startswith("embd-")


def test_the_sdk_reads_base64_and_dimensions(embedder):
    client = openai.OpenAI(base_url=f"{embedder.url}/v1", api_key="none", max_retries=0)
    floats = embed(embedder, {"input": "spring rain"}).json()["data"][0]["embedding"]
    assert client.embeddings.create(model=MODEL, input="spring rain").data[0].embedding == pytest.approx(floats)
    packed = embed(embedder, {"input": "spring rain", "encoding_format": "base64"}).json()["data"][0]["embedding"]
    assert list(array.array("f", base64.b64decode(packed))) == pytest.approx(floats, rel=1e-6)
    assert len(client.embeddings.create(model=MODEL, input="x", dimensions=16).data[0].embedding) == 16


@pytest.mark.parametrize(("body", "words"), [
    ({"input": []}, "'input'"),
    ({"input": [{"role": "user"}]}, "each input"),
    ({"input": "x", "dimensions": 129}, "Dimensions 129"),
    ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
    ({"input": "long " * 60}, "maximum context length is 64"),
])
def test_what_vllm_refuses_is_a_400_in_its_shape(embedder, body, words):
    refused = embed(embedder, body)
    assert refused.status_code == 400 and words in refused.json()["error"]["message"]
    assert refused.json()["error"]["type"] == "BadRequestError"


def test_a_pooling_model_has_no_generation_routes(embedder):
    chat = httpx.post(f"{embedder.url}/v1/chat/completions", json=chat_body(max_tokens=4), timeout=30)
    assert chat.status_code == 404
    completions = httpx.post(f"{embedder.url}/v1/completions", json={"model": MODEL, "prompt": "x"}, timeout=30)
    assert completions.status_code == 404


def test_a_generating_model_has_no_embeddings_route():
    with launch(4, "--speed", "10") as sim:
        assert embed(sim, {"input": "x"}).status_code == 404


def test_timed_embeddings_hold_a_slot_for_their_prefill_and_are_logged(embedder):
    embedder.reset_peak()
    assert embed(embedder, {"input": "tell me", "user": "alice"}).status_code == 200
    [entry] = embedder.requests()
    assert entry["user"] == "alice" and entry["outcome"] == "length" and entry["ended"] >= entry["arrived"]
    assert embedder.stats()["peak_running"] >= 1
