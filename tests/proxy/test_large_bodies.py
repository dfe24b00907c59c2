"""A body at the size limit costs other keys little: reading and parsing it must not hold the
gateway's event loop for long, or every other request of that process waits behind it."""

from __future__ import annotations

import statistics
import threading
import time

import httpx
from django.conf import settings

from tests.support.polling import wait_for


def max_size_body() -> bytes:
    """A chat request just under the size limit, in the costliest shape to parse per byte: a great
    many tiny messages. Its model does not exist, so the gateway refuses it right after parsing."""
    message = b'{"role":"user","content":"x"},'
    start, end = b'{"model":"no-such-model","messages":[', b'{"role":"user","content":"x"}]}'
    count = (settings.GP_MAX_BODY_BYTES - len(start) - len(end)) // len(message)
    return start + message * count + end


def test_three_senders_of_max_size_bodies_barely_slow_another_keys_requests(gateway, cast):
    body = max_size_body()
    assert settings.GP_MAX_BODY_BYTES * 0.95 < len(body) <= settings.GP_MAX_BODY_BYTES
    sent = [0, 0, 0]
    refused_otherwise: list[int] = []
    stop = threading.Event()

    def send(sender: int) -> None:
        headers = {"authorization": f"Bearer {cast['carol'].secret}", "content-type": "application/json"}
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                response = client.post(gateway.url + "/v1/chat/completions", content=body, headers=headers)
                if response.status_code != 404:  # parsed whole, then refused: model_not_found
                    refused_otherwise.append(response.status_code)
                sent[sender] += 1

    senders = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(3)]
    for thread in senders:
        thread.start()
    latencies = []
    try:
        wait_for(lambda: all(sent), timeout=30, what="a first body from each sender")
        before = sum(sent)
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=10, headers={"authorization": f"Bearer {cast['bob'].secret}"}) as client:
            # At least 40 calls, over at least 6 large bodies: a stretch they kept coming through.
            while len(latencies) < 40 or (sum(sent) - before < 6 and time.monotonic() < deadline):
                started = time.perf_counter()
                assert client.get(gateway.url + "/v1/models").status_code == 200
                latencies.append(time.perf_counter() - started)
        during = sum(sent) - before
    finally:
        stop.set()
        for thread in senders:
            thread.join(timeout=30)
    assert not refused_otherwise
    assert during >= 6, "the senders were not sending while the latencies were measured"
    median = statistics.median(latencies)
    assert median < 0.050, (f"median /v1/models latency {median * 1000:.0f} ms over {len(latencies)} calls "
                            f"beside {during} large bodies")
