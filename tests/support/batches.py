"""Batches end to end through the OpenAI SDK: the runner's settings (short, so a killed runner's
work is taken over within a test), input lines, and waiting for a batch's status and output."""

from __future__ import annotations

import json

from tests.support.polling import wait_for

# Short, so a killed runner's batch is taken over quickly (its claim, and the engine slots its
# leases held, come free within seconds) and slices end within a test.
RUNNER_ENV = {"GP_BATCH_POLL_SECONDS": "0.5", "GP_BATCH_CLAIM_SECONDS": "3", "GP_BATCH_SLICE_SECONDS": "8",
              "GP_BATCH_KEY_CHECK_SECONDS": "2", "GP_LEASE_TTL_SECONDS": "6", "GP_USAGE_FLUSH_SECONDS": "0.5",
              "GP_POLL_SECONDS": "1"}


def chat_lines(count: int, model: str = "sim", max_tokens: int = 8, prefix: str = "req") -> bytes:
    return b"".join(
        json.dumps({"custom_id": f"{prefix}-{n}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": model, "max_tokens": max_tokens,
                             "messages": [{"role": "user", "content": f"line {n}"}]}}).encode() + b"\n"
        for n in range(count)
    )


def wait_for_status(client, batch_id: str, statuses: set[str], timeout: float = 60.0):
    """The batch once its status is one of `statuses` (the SDK's retrieve, polled)."""
    def reached():
        batch = client.batches.retrieve(batch_id)
        return batch if batch.status in statuses else None

    return wait_for(reached, timeout=timeout, interval=0.2, what=f"batch {batch_id} to be {statuses}")


def output_lines(client, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).read().splitlines()]


def run_to_the_end(client, name: str, lines: bytes, endpoint: str):
    """Upload `lines` as a batch file, run them as a batch of `endpoint`, and return the batch once
    it completed (a failed, expired or cancelled one fails the test)."""
    uploaded = client.files.create(file=(name, lines), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
    assert batch.endpoint == endpoint
    done = wait_for_status(client, batch.id, {"completed", "failed", "expired", "cancelled"})
    assert done.status == "completed", done
    return done
