"""Real vLLM's bodies, through the gateway, against OpenAI's own OpenAPI document: a chat, its
stream's chunks, a completion and an embedding match it but for VLLM_DEVIATIONS
(tests/support/openai_spec.py), the list enginesim mirrors. A vLLM that fixes one, or breaks
another, fails here: enginesim and the list then follow it."""

from fairness.models import Replica
from tests.engine.conftest import EMBEDDING_MODEL_NAME
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.openai_spec import assert_generation_bodies_match_as_vllm, assert_matches, violations
from tests.support.v1_calls import post

CHAT = {"model": TINY, "messages": [{"role": "user", "content": "Tell me about spring."}], "max_tokens": 8}


def test_vllms_bodies_match_openais_schemas_but_for_the_known_nulls(cast, gateway, engine_replicas, vllm_embedder):
    Replica.objects.create(name="vllm-embed", base_url=vllm_embedder.base_url, model=EMBEDDING_MODEL_NAME,
                           max_num_seqs=8, model_kind=Replica.ModelKind.EMBEDDING)
    alice = cast["alice"].secret
    shown = assert_generation_bodies_match_as_vllm(gateway, alice, CHAT)
    print("vLLM's chat body breaks OpenAI's schema at:", sorted(shown))
    embedded = post(gateway, alice, {"model": EMBEDDING_MODEL_NAME, "input": ["a", "b"]}, path="/v1/embeddings")
    assert embedded.status_code == 200, embedded.text
    broken = violations(embedded.json(), "CreateEmbeddingResponse")
    print("vLLM's embedding body breaks OpenAI's schema at:", broken)
    assert_matches(embedded.json(), "CreateEmbeddingResponse")
