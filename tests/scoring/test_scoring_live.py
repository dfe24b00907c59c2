"""POST /v1/rerank, /v2/rerank and /v1/score through a live gateway to pooling replicas (enginesim
as an embedding model, and as a cross-encoder "reranker"), as plain HTTP: answered as vLLM
answers, charged as prompt tokens, refused in OpenAI's shape when the body or the model's kind is
wrong."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.polling import wait_for
from tests.support.usage_records import recorded
from tests.support.v1_calls import assert_error, post

RERANKER = "sim-rerank"
DOCUMENTS = ["Herons wade in shallow water.", "The train leaves at noon.", "Egrets and herons hunt fish."]


@pytest.fixture(scope="module")
def reranker_sim() -> Iterator[EngineSimProcess]:
    process = start_enginesim(model=RERANKER, max_num_seqs=4, extra_args=["--runner", "pooling"])
    yield process
    process.stop()


@pytest.fixture
def reranker(reranker_sim, gateway, embedding_replica) -> Replica:
    return Replica.objects.create(name="rerank-a", base_url=reranker_sim.url, model=RERANKER, max_num_seqs=4,
                                  model_kind=Replica.ModelKind.RERANKER)


def ready(gateway, member, model: str) -> None:
    body = {"model": model, "query": "x", "documents": ["y"]}
    wait_for(lambda: post(gateway, member.secret, body, path="/v1/rerank").status_code == 200, what=model)


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
@pytest.mark.parametrize("model", [EMBEDDING_MODEL, RERANKER])
def test_a_rerank_orders_the_documents_and_charges_their_prompt_tokens(cast, gateway, reranker, path, model):
    alice = cast["alice"]
    ready(gateway, alice, model)
    answer = post(gateway, alice.secret, {"model": model, "query": "Which birds hunt fish?", "documents": DOCUMENTS},
                  path=path)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert sorted(r["index"] for r in body["results"]) == [0, 1, 2]
    assert all(r["document"]["text"] == DOCUMENTS[r["index"]] for r in body["results"])
    top = post(gateway, alice.secret, {"model": model, "query": "fish", "documents": DOCUMENTS, "top_n": 1},
               path=path).json()
    assert len(top["results"]) == 1
    row = recorded(answer.headers["x-request-id"])
    assert (row.endpoint, row.model, row.status) == ("rerank", model, 200)
    assert row.prompt_tokens == body["usage"]["prompt_tokens"] > 10 and row.completion_tokens == 0


def test_a_score_pairs_texts_and_charges_their_prompt_tokens(cast, gateway, reranker):
    bob = cast["bob"]
    ready(gateway, bob, EMBEDDING_MODEL)
    answer = post(gateway, bob.secret, {"model": EMBEDDING_MODEL, "text_1": "herons", "text_2": ["herons", "trains"]},
                  path="/v1/score")
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert [d["index"] for d in data] == [0, 1]
    assert data[0]["score"] == pytest.approx(1.0)  # a text scored against itself
    assert data[1]["score"] < data[0]["score"]
    row = recorded(answer.headers["x-request-id"])
    assert (row.endpoint, row.completion_tokens) == ("score", 0)
    assert row.prompt_tokens == answer.json()["usage"]["prompt_tokens"] > 0


def test_each_kind_takes_only_its_endpoints(cast, gateway, reranker):
    alice = cast["alice"]
    ready(gateway, alice, RERANKER)
    to_chat = assert_error(post(gateway, alice.secret, {"model": MODEL, "query": "q", "documents": ["d"]},
                                path="/v1/rerank"), 400, "wrong_model_kind")
    assert "/v1/chat/completions" in to_chat["message"]
    embed = assert_error(post(gateway, alice.secret, {"model": RERANKER, "input": "x"}, path="/v1/embeddings"), 400,
                         "wrong_model_kind")
    assert "/v1/rerank and /v1/score" in embed["message"]
    chat = {"model": RERANKER, "messages": [{"role": "user", "content": "hi"}]}
    assert_error(post(gateway, alice.secret, chat), 400, "wrong_model_kind")
    models = httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {alice.secret}"}).json()
    assert {m["id"]: m["kind"] for m in models["data"]}[RERANKER] == "reranker"


BAD = [
    ("/v1/rerank", {"model": EMBEDDING_MODEL, "documents": ["d"]}, "query", "missing_required_parameter"),
    ("/v1/rerank", {"model": EMBEDDING_MODEL, "query": "q"}, "documents", "missing_required_parameter"),
    ("/v1/rerank", {"model": EMBEDDING_MODEL, "query": "q", "documents": []}, "documents", "invalid_type"),
    ("/v1/rerank", {"model": EMBEDDING_MODEL, "query": "q", "documents": ["d"] * 1001}, "documents",
     "unsupported_value"),
    ("/v1/rerank", {"model": EMBEDDING_MODEL, "query": "q", "documents": ["d"], "top_n": -1}, "top_n",
     "invalid_type"),
    ("/v2/rerank", {"model": EMBEDDING_MODEL, "query": "q", "documents": ["d"], "stream": True}, "stream",
     "unsupported_value"),
    ("/v1/score", {"model": EMBEDDING_MODEL, "text_1": "a"}, "text_1", "missing_required_parameter"),
    ("/v1/score", {"model": EMBEDDING_MODEL, "queries": "a", "documents": []}, "documents", "invalid_type"),
    ("/v1/score", {"text_1": "a", "text_2": "b"}, "model", "missing_required_parameter"),
]


def test_bad_bodies_get_openai_shaped_400s_naming_the_field(cast, gateway, reranker):
    alice = cast["alice"]
    for path, body, param, code in BAD:
        assert assert_error(post(gateway, alice.secret, body, path=path), 400, code)["param"] == param, body
    assert_error(post(gateway, alice.secret, b"{", path="/v2/rerank"), 400, "invalid_json")
    # What the engine refuses (a query that is not text) comes back as its 400, not a 5xx.
    refused = post(gateway, alice.secret, {"model": EMBEDDING_MODEL, "query": 7, "documents": ["d"]},
                   path="/v1/rerank")
    assert_error(refused, 400)
    assert_error(httpx.get(gateway.url + "/v2/rerank", headers={"authorization": f"Bearer {alice.secret}"}), 405)
