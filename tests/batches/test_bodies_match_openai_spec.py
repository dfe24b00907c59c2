"""Every body the portal writes itself (errors, models, files, batches, their lists) matches OpenAI's
own OpenAPI document (its schemas vendored in tests/fixtures/openai_schemas.json); enginesim's chat,
completion, stream and embedding bodies match it but where vLLM's own do not
(tests/support/openai_spec.py's VLLM_DEVIATIONS, which the real tier's test holds to vLLM)."""

from __future__ import annotations

import httpx

from tests.support.batches import chat_lines, run_to_the_end
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.openai_spec import VLLM_DEVIATIONS, assert_generation_bodies_match_as_vllm, assert_matches
from tests.support.v1_calls import CHAT, post


def test_the_portals_own_bodies_match(cast, gateway, replica, runner):
    carol = cast["carol"].secret
    headers = {"authorization": f"Bearer {carol}"}

    def get(path: str) -> dict:
        return httpx.get(gateway.url + path, headers=headers, timeout=30).json()

    assert_matches(get("/v1/models"), "ListModelsResponse")
    assert_matches(get(f"/v1/models/{MODEL}"), "Model")
    for refused in (post(gateway, None, CHAT), post(gateway, carol, {"model": MODEL}),
                    post(gateway, carol, {**CHAT, "model": "nowhere"}), httpx.get(gateway.url + "/v1/nothing")):
        assert_matches(refused.json(), "ErrorResponse")

    uploaded = httpx.post(gateway.url + "/v1/files", headers=headers, timeout=30, data={"purpose": "batch"},
                          files={"file": ("lines.jsonl", chat_lines(2, model=MODEL))}).json()
    assert_matches(uploaded, "OpenAIFile")
    assert_matches(get("/v1/files"), "ListFilesResponse")
    created = httpx.post(gateway.url + "/v1/batches", headers=headers, timeout=30, json={
        "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}).json()
    assert_matches(created, "Batch")  # validating: most of its moments have not come
    from openai import OpenAI

    client = OpenAI(base_url=gateway.url + "/v1", api_key=carol, max_retries=0)
    done = run_to_the_end(client, "more.jsonl", chat_lines(2, model=MODEL), "/v1/chat/completions")
    assert_matches(get(f"/v1/batches/{done.id}"), "Batch")
    assert_matches(get("/v1/batches"), "ListBatchesResponse")
    deleted = httpx.delete(gateway.url + f"/v1/files/{uploaded['id']}", headers=headers, timeout=30).json()
    assert_matches(deleted, "DeleteFileResponse")


def test_enginesims_answers_match_but_where_vllms_do_not(cast, gateway, replica, embedding_replica):
    alice = cast["alice"].secret
    shown = assert_generation_bodies_match_as_vllm(gateway, alice, CHAT)
    assert shown == VLLM_DEVIATIONS  # enginesim says what vLLM says, nulls and all
    embedded = post(gateway, alice, {"model": EMBEDDING_MODEL, "input": ["a", "b"]}, path="/v1/embeddings")
    assert_matches(embedded.json(), "CreateEmbeddingResponse")
