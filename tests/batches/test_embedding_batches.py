"""A batch of embedding lines, as OpenAI's Batch API takes them: each line runs through the same
admission as a live /v1/embeddings request and its answer lands in the output file."""

from __future__ import annotations

import json

from fairness.models import UsageRecord
from tests.support.batches import output_lines, run_to_the_end
from tests.support.cast import EMBEDDING_MODEL
from tests.support.polling import wait_for


def embedding_lines(count: int) -> bytes:
    return b"".join(
        json.dumps({"custom_id": f"doc-{n}", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": EMBEDDING_MODEL, "input": [f"passage {n}", f"passage {n}, again"]}}).encode()
        + b"\n" for n in range(count))


def test_an_embeddings_batch_answers_every_line_and_charges_its_prompts(openai_for, cast, embedding_replica, runner):
    client = openai_for(cast["carol"])
    wrong_kind = json.dumps({"custom_id": "chat-model", "method": "POST", "url": "/v1/embeddings",
                             "body": {"model": "sim", "input": "x"}}).encode() + b"\n"
    done = run_to_the_end(client, "docs.jsonl", embedding_lines(6) + wrong_kind, "/v1/embeddings")
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (7, 6, 1)
    results = {r["custom_id"]: r for r in output_lines(client, done.output_file_id)}
    assert sorted(results) == [f"doc-{n}" for n in range(6)]
    for result in results.values():
        body = result["response"]["body"]
        assert result["response"]["status_code"] == 200 and len(body["data"]) == 2
        assert body["usage"]["prompt_tokens"] > 0
    [failed] = output_lines(client, done.error_file_id)
    assert failed["custom_id"] == "chat-model"
    assert failed["response"]["body"]["error"]["code"] == "wrong_model_kind"

    def recorded() -> list[tuple[str, int]]:
        return list(UsageRecord.objects.filter(key_id=cast["carol"].key_id, status=200)
                    .values_list("endpoint", "completion_tokens"))

    assert wait_for(lambda: len(rows := recorded()) == 6 and rows, timeout=60, what="the lines' usage",
                    evidence=runner.log_tail) == [("embeddings", 0)] * 6
