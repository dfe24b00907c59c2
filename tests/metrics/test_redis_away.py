"""With Redis away the gateway still answers /metrics, saying so (gpuportal_redis_up 0) rather
than failing the scrape (which would read as the gateway itself down), and the requests it
refused meanwhile are counted once Redis is back."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support.cast import MODEL
from tests.support.gateway_process import GatewayProcess
from tests.support.metrics import Samples, scrape
from tests.support.polling import wait_for
from tests.support.processes import start_gateway
from tests.support.redis_server import PrivateRedis

ANSWERS = "gpuportal_http_requests_total"
TOKEN = "scrape-token-for-tests"


@pytest.fixture
def own_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


@pytest.fixture
def gateway_on_own_redis(live_db_url, own_redis, tiers) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="gateway-own-redis", REDIS_URL=own_redis.url(), GP_METRICS_TOKEN=TOKEN)
    yield process
    process.stop()


def test_the_scrape_says_redis_is_away_and_the_refusals_are_counted_when_it_is_back(
    gateway_on_own_redis, own_redis, cast,
):
    url = gateway_on_own_redis.url
    assert scrape(url, TOKEN).get("gpuportal_redis_up") == 1

    own_redis.stop()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    refused = httpx.post(url + "/v1/chat/completions", json=body, timeout=30,
                         headers={"authorization": f"Bearer {cast['alice'].secret}"})
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
    away = scrape(url, TOKEN)  # 200, not a failed scrape
    assert away.get("gpuportal_redis_up") == 0
    assert not away.series("gpuportal_in_flight")  # left out, not shown as a false zero
    # Saying so is no way around the scrape token.
    assert httpx.get(url + "/metrics", timeout=10).status_code == 401

    own_redis.start()  # empty, as a restarted Redis without persistence is

    def counted(samples: Samples) -> bool:
        return samples.get("gpuportal_redis_up") == 1 and samples.get(
            ANSWERS, status="503", reason="store_unavailable") >= 1

    assert wait_for(lambda: counted(scrape(url, TOKEN)), what="the refusal counted once Redis is back")
