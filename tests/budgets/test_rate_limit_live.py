"""A rate limit holds across gateway processes: 1,200 requests a minute for one key, sent through
two gateways as fast as they answer for 15 seconds, lets through 300 within 2%. (The rate is
high so that the run is short; the count, and so the precision asked, is that of 100 a minute
for three minutes.)"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fairness.models import Tier
from tests.support.live_admission import chat_body
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

MINUTES = 0.25
RATE = 1200


@pytest.mark.long
def test_a_key_limited_to_1200_a_minute_gets_300_in_15_seconds_through_two_gateways(gateway, live_db_url,
                                                                                    cast, replica):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=RATE)
    Tier.objects.get(name="interactive").save()  # bump the epoch
    alice = cast["alice"]
    other = start_gateway(live_db_url, name="gateway-rate")
    headers = {"authorization": f"Bearer {alice.secret}"}
    body = chat_body(alice, max_tokens=1)
    try:
        urls = [gateway.url, other.url]
        # Both see the limit before the clock starts, and the key has spent its burst: from a
        # refusal on, exactly the rate gets through.
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
            def refused(url: str) -> bool:  # eight at a time: one by one would not outpace the rate
                return 429 in pool.map(lambda _: client.post(url + "/v1/chat/completions", json=body,
                                                             headers=headers).status_code, range(8))

            for url in urls:
                wait_for(lambda url=url: refused(url), timeout=20, what="the limit to reach the gateway")
        counts = {200: 0, 429: 0}
        lock = threading.Lock()
        deadline = time.monotonic() + MINUTES * 60

        def hammer(url: str) -> None:
            with httpx.Client(timeout=30) as client:
                while time.monotonic() < deadline:
                    status = client.post(url + "/v1/chat/completions", json=body, headers=headers).status_code
                    with lock:
                        counts[status] = counts.get(status, 0) + 1

        threads = [threading.Thread(target=hammer, args=(url,)) for url in urls for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        other.stop()
    expected = RATE * MINUTES
    assert abs(counts[200] - expected) <= 0.02 * expected, counts
    assert counts[429] > counts[200]  # it was really held back
    assert set(counts) == {200, 429}
