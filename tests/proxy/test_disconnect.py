"""A client that goes away takes its engine work with it."""

import contextlib

import httpx

from fairness.accounting import usage
from fairness.models import UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.polling import wait_for

LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me a very long story."}],
    "max_tokens": 3000,
    "ignore_eos": True,
}


def running(sim) -> int:
    return sim.stats()["running"] + sim.stats()["waiting"]


def test_leaving_mid_stream_aborts_the_engine_request(gateway, replica, cast, sim):
    headers = {"authorization": f"Bearer {cast['alice'].secret}"}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json={**LONG, "stream": True},
                      headers=headers, timeout=30) as response:
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        assert running(sim) == 1
    # Leaving the block closed the connection mid-stream.
    wait_for(lambda: running(sim) == 0, timeout=5, what="the engine to drop the request")

    def recorded():
        usage.flush(redis_sync())
        return UsageRecord.objects.filter(request_id=request_id).first()

    record = wait_for(recorded, what="the usage record")
    assert record.status == 499 and 0 < record.completion_tokens < 3000


def test_leaving_while_waiting_for_a_whole_answer_aborts_it_too(gateway, replica, cast, sim):
    headers = {"authorization": f"Bearer {cast['bob'].secret}"}
    with contextlib.suppress(httpx.ReadTimeout):  # the client gives up, closing its connection
        httpx.post(gateway.url + "/v1/chat/completions", json=LONG, headers=headers, timeout=1.0)
    wait_for(lambda: running(sim) == 0, timeout=5, what="the engine to drop the request")
