"""The public capacity page and /api/capacity say how much batch work is queued, in plain words."""

from __future__ import annotations

import httpx

from fairness.models import BatchStatus
from tests.support.batch_rows import carol_key, make_batch
from tests.support.live_load import capacity_json


def test_the_page_and_the_api_say_no_batch_work_is_queued(gateway, cast):
    make_batch(carol_key(cast), BatchStatus.COMPLETED, done=3)

    assert capacity_json(gateway.url)["batch_work"] == {
        "requests": 0, "batches": 0, "sentence": "No Batch API work queued."}
    assert '<p id="batch-work">No Batch API work queued.</p>' in httpx.get(gateway.url + "/capacity/", timeout=10).text


def test_the_page_and_the_api_count_requests_still_to_run(gateway, cast):
    key = carol_key(cast)
    make_batch(key, pending=1204, done=30)
    make_batch(key, BatchStatus.VALIDATING, pending=6)
    make_batch(key, BatchStatus.CANCELLING, pending=50)

    work = capacity_json(gateway.url)["batch_work"]

    sentence = "Batch API work queued: 1,210 requests in 2 batches."
    assert work == {"requests": 1210, "batches": 2, "sentence": sentence}
    page = httpx.get(gateway.url + "/capacity/", timeout=10).text
    assert f'<p id="batch-work">{sentence}</p>' in page
    assert "carol" not in page  # counts, never whose
