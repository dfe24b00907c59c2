"""A small batch through the whole path against real vLLM: the official SDK uploads and starts it,
a real Celery worker runs its lines through admission to the CPU build, the output is read back."""

from __future__ import annotations

import json

from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.batches import RUNNER_ENV, output_lines, wait_for_status
from tests.support.processes import LOG_DIR, free_port, gateway_env
from tests.support.worker_process import WorkerProcess


def test_a_small_batch_runs_on_real_vllm(cast, engine_client, live_db_url):
    client = engine_client(cast["carol"])
    lines = b"".join(
        json.dumps({"custom_id": f"q-{n}", "method": "POST", "url": "/v1/completions",
                    "body": {"model": TINY, "prompt": f"Count to {n}:", "max_tokens": 8}}).encode() + b"\n"
        for n in range(6)
    ) + json.dumps({"custom_id": "too-long", "method": "POST", "url": "/v1/completions",
                    "body": {"model": TINY, "prompt": "x", "max_tokens": 10**6}}).encode() + b"\n"
    uploaded = client.files.create(file=("in.jsonl", lines), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h")

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    runner = WorkerProcess(gateway_env(live_db_url, **RUNNER_ENV), LOG_DIR / f"batch-worker-{free_port()}.log",
                           queues="celery,batches")
    try:
        done = wait_for_status(client, batch.id, {"completed", "failed", "expired", "cancelled"}, timeout=180)
    finally:
        runner.stop()
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (7, 6, 1)
    results = output_lines(client, done.output_file_id)
    assert sorted(r["custom_id"] for r in results) == [f"q-{n}" for n in range(6)]
    for result in results:
        body = result["response"]["body"]
        assert body["model"] == TINY and body["usage"]["completion_tokens"] > 0 and body["choices"][0]["text"]
    # vLLM's own refusal of a request it cannot serve, kept in the error file with its status.
    [error] = output_lines(client, done.error_file_id)
    assert error["custom_id"] == "too-long" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["message"]
