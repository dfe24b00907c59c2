"""Any gateway process, of one server or another, answers /metrics with the totals of all."""

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.live_admission import drop, hold
from tests.support.metrics import Samples, ask, counting_from_zero, scrape, scrape_until
from tests.support.processes import LOG_DIR, free_port, gateway_env, start_gateway

REQUESTS = "gpuportal_requests_total"


@pytest.fixture
def second(live_db_url, gateway, replica) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="gateway-b")
    yield process
    process.stop()


def test_two_gateways_report_the_same_totals(gateway, second, cast, redis_url):
    counting_from_zero(gateway.url, redis_url)
    for _ in range(2):
        assert ask(gateway.url, cast["alice"]).status_code == 200
    for _ in range(3):
        assert ask(second.url, cast["alice"]).status_code == 200
    assert ask(second.url, cast["carol"]).status_code == 200

    for url in (gateway.url, second.url):
        # Each process flushes its counts within a second: wait for both processes' to be in.
        samples = scrape_until(url, lambda s: sum(s.series(REQUESTS).values()) == 6, "both processes' counts")
        assert samples.get(REQUESTS, tier="interactive", status="200", endpoint="chat") == 5
        assert samples.get(REQUESTS, tier="batch", status="200", endpoint="chat") == 1
        assert samples.get("gpuportal_queue_wait_seconds_count", tier="interactive") == 5
        assert samples.get("gpuportal_tokens_total", tier="interactive", kind="completion") == 5 * 5

    async def running_elsewhere() -> Samples:
        async with httpx.AsyncClient(timeout=60) as client:
            streams = await hold(client, second.url, cast["bob"], 1)
            seen = await asyncio.to_thread(scrape, gateway.url)  # the other process's stream
            await drop(streams)
            return seen

    assert asyncio.run(running_elsewhere()).get("gpuportal_in_flight", tier="interactive") == 1
    for url in (gateway.url, second.url):
        after = scrape_until(
            url, lambda s: s.get(REQUESTS, tier="interactive", status="499", endpoint="chat") == 1, "the dropped stream"
        )
        assert after.get("gpuportal_in_flight", tier="interactive") == 0


@pytest.fixture
def two_workers(live_db_url, gateway, replica) -> Iterator[GatewayProcess]:
    port = free_port()
    process = GatewayProcess(port, gateway_env(live_db_url), LOG_DIR / f"gateway-workers-{port}.log", workers=2)
    yield process
    process.stop()


def test_the_workers_of_one_server_agree(two_workers, cast):
    for _ in range(6):
        assert ask(two_workers.url, cast["alice"]).status_code == 200
    # Each worker flushes its counts within a second.
    scrape_until(two_workers.url, lambda s: s.get(REQUESTS, tier="interactive", status="200", endpoint="chat") == 6,
                 "both workers' counts")
    # Each scrape may land on either worker; a per-process count would differ between them.
    counts = {
        scrape(two_workers.url).get(REQUESTS, tier="interactive", status="200", endpoint="chat") for _ in range(8)
    }
    assert counts == {6}
