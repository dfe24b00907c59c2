"""A batch of Responses API lines, as OpenAI's Batch API takes them: each runs through the same
admission as a live /v1/responses request, its answer (a response object) in the output file and
its usage charged; a line asking to stream is refused in the error file."""

from __future__ import annotations

import json

from fairness.models import UsageRecord
from tests.support.batches import output_lines, run_to_the_end
from tests.support.cast import MODEL
from tests.support.polling import wait_for


def line(custom_id: str, body: dict) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/responses", "body": body}).encode() + b"\n"


def test_a_responses_batch_answers_every_line_and_charges_its_usage(openai_for, cast, replica, runner):
    client = openai_for(cast["carol"])
    lines = b"".join(line(f"q-{n}", {"model": MODEL, "input": f"Question {n}?", "max_output_tokens": 6})
                     for n in range(4))
    lines += line("streamed", {"model": MODEL, "input": "x", "stream": True})
    done = run_to_the_end(client, "questions.jsonl", lines, "/v1/responses")
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 4, 1)
    results = {r["custom_id"]: r for r in output_lines(client, done.output_file_id)}
    assert sorted(results) == [f"q-{n}" for n in range(4)]
    for result in results.values():
        body = result["response"]["body"]
        assert result["response"]["status_code"] == 200 and body["object"] == "response"
        assert body["usage"]["output_tokens"] >= 1
    def charged() -> list[int]:
        return sorted(UsageRecord.objects.filter(endpoint="responses", key_id=cast["carol"].key_id, status=200)
                      .values_list("prompt_tokens", flat=True))

    answered = sorted(r["response"]["body"]["usage"]["input_tokens"] for r in results.values())
    assert wait_for(lambda: len(rows := charged()) == 4 and rows, timeout=60, what="the lines' usage",
                    evidence=runner.log_tail) == answered
    [refused] = output_lines(client, done.error_file_id)
    assert refused["custom_id"] == "streamed"
