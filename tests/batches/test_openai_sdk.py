"""The official openai SDK runs a batch end to end: files.create, batches.create, batches.retrieve
until completed, files.content parsed line by line."""

from __future__ import annotations

import json

from fairness.models import BatchLine, UsageRecord
from tests.support.batches import chat_lines, output_lines, wait_for_status
from tests.support.polling import wait_for


def test_a_batch_runs_to_completed_with_every_custom_id_answered_once(openai_for, cast, runner):
    client = openai_for(cast["carol"])
    uploaded = client.files.create(file=("in.jsonl", chat_lines(20)), purpose="batch")

    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"project": "survey"})
    assert (batch.object, batch.status, batch.input_file_id) == ("batch", "validating", uploaded.id)
    assert batch.metadata == {"project": "survey"} and batch.expires_at - batch.created_at == 24 * 3600

    done = wait_for_status(client, batch.id, {"completed", "failed", "expired", "cancelled"})
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (20, 20, 0)
    assert done.error_file_id is None
    assert done.in_progress_at <= done.finalizing_at <= done.completed_at
    results = output_lines(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in results) == sorted(f"req-{n}" for n in range(20))
    for result in results:
        assert result["error"] is None and result["id"].startswith("batch_req_")
        assert result["response"]["status_code"] == 200
        assert result["response"]["body"]["choices"][0]["message"]["content"]
    output = client.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output"

    # Every line was a request of carol's key, accounted as any other.
    wait_for(lambda: UsageRecord.objects.filter(key_id=cast["carol"].key_id, status=200).count() == 20,
             timeout=60, what="the lines' usage records", evidence=runner.log_tail)
    longest = UsageRecord._meta.get_field("request_id").max_length  # PostgreSQL refuses longer ones
    assert all(len(r) <= longest for r in UsageRecord.objects.values_list("request_id", flat=True))


def test_bad_lines_go_to_the_error_file_and_the_rest_run(openai_for, cast, runner):
    client = openai_for(cast["carol"])
    good = chat_lines(3)
    lines = [
        good.splitlines()[0],
        b"not json",
        json.dumps({"custom_id": "req-0", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": "sim", "messages": []}}).encode(),  # a duplicate custom_id
        json.dumps({"custom_id": "other-model", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": "no-such-model", "messages": []}}).encode(),
        json.dumps({"custom_id": "wrong-url", "method": "POST", "url": "/v1/completions",
                    "body": {"model": "sim", "prompt": "x"}}).encode(),
        good.splitlines()[1],
    ]
    uploaded = client.files.create(file=("mixed.jsonl", b"\n".join(lines) + b"\n"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")

    done = wait_for_status(client, batch.id, {"completed", "failed"})
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 2, 4)
    assert sorted(r["custom_id"] for r in output_lines(client, done.output_file_id)) == ["req-0", "req-1"]
    errors = output_lines(client, done.error_file_id)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        ("", "invalid_json_line"), ("req-0", "duplicate_custom_id"), ("other-model", "model_not_found"),
        ("wrong-url", "invalid_url"),
    ]
    assert all(e["response"] is None for e in errors)
    assert not BatchLine.objects.exists()  # ended, its results are in its files alone
