"""/metrics is open by default and takes a bearer token when GP_METRICS_TOKEN is set."""

from collections.abc import Iterator

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.metrics import scrape
from tests.support.processes import start_gateway

TOKEN = "scrape-token-for-tests"


@pytest.fixture
def guarded(live_db_url, gateway) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="gateway-metrics-token", GP_METRICS_TOKEN=TOKEN)
    yield process
    process.stop()


def test_it_is_open_without_a_token_setting(gateway, tiers):
    assert scrape(gateway.url).get("gpuportal_in_flight", tier="batch") == 0


def test_a_configured_token_is_required(guarded, tiers):
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
        response = httpx.get(guarded.url + "/metrics", headers=headers, timeout=10)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert scrape(guarded.url, token=TOKEN).get("gpuportal_queued", tier="interactive") == 0

