"""Rerank and score against real vLLM: the tiny model served as an embedding model scores with
cosine similarity, through the gateway as plain HTTP, each charged the prompt tokens vLLM reports."""

from fairness.models import Replica
from tests.engine.conftest import EMBEDDING_MODEL_NAME
from tests.support.usage_records import recorded
from tests.support.v1_calls import post

DOCUMENTS = ["Herons wade in shallow water.", "The train leaves at noon.", "Egrets and herons hunt fish."]


def test_rerank_and_score_are_answered_by_vllm_and_charged_its_prompt_count(cast, gateway, vllm_embedder,
                                                                            engine_replicas):
    Replica.objects.create(name="vllm-embed", base_url=vllm_embedder.base_url, model=EMBEDDING_MODEL_NAME,
                           max_num_seqs=8, model_kind=Replica.ModelKind.EMBEDDING)
    alice = cast["alice"].secret
    for path in ("/v1/rerank", "/v2/rerank"):
        answer = post(gateway, alice, {"model": EMBEDDING_MODEL_NAME, "query": "Which birds hunt fish?",
                                       "documents": DOCUMENTS}, path=path)
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert sorted(r["index"] for r in results) == [0, 1, 2]
        assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results),
                                                                  reverse=True)
        row = recorded(answer.headers["x-request-id"])
        assert (row.endpoint, row.replica, row.completion_tokens) == ("rerank", "vllm-embed", 0)
        assert row.prompt_tokens == answer.json()["usage"]["prompt_tokens"] > 10

    scored = post(gateway, alice, {"model": EMBEDDING_MODEL_NAME, "text_1": "herons", "text_2": ["herons", "trains"]},
                  path="/v1/score")
    assert scored.status_code == 200, scored.text
    data = scored.json()["data"]
    assert data[0]["score"] > data[1]["score"]  # a text is most like itself
    row = recorded(scored.headers["x-request-id"])
    assert (row.endpoint, row.prompt_tokens) == ("score", scored.json()["usage"]["prompt_tokens"])
