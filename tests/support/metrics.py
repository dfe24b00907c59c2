"""Scraping a gateway's /metrics the way Prometheus does and reading samples out of it, and one
chat completion through the gateway to count."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import redis
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cast import MODEL, Member
from tests.support.polling import wait_for


class Samples:
    """One scrape: every sample by name and labels; a series that is absent reads 0."""

    def __init__(self, text: str) -> None:
        self.values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.values[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def get(self, name: str, **labels: str) -> float:
        return self.values.get((name, frozenset(labels.items())), 0.0)

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: value for (sample, labels), value in self.values.items() if sample == name}


def scrape(url: str, token: str | None = None) -> Samples:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url + "/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    return Samples(response.text)


def scrape_until(url: str, condition: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `condition` holds (a stream is counted a moment after its client is done)."""

    def ready() -> Samples | None:
        samples = scrape(url)
        return samples if condition(samples) else None

    found = wait_for(ready, what=what)
    assert found is not None
    return found


ANSWERS = "gpuportal_http_requests_total"


def settled(url: str) -> Samples:
    """A scrape holding every count the gateway process made before it (a previous test's too):
    its answers, its requests' counters and latencies. The process adds all it has counted in one
    flush, so once an answer of ours shows, so do those before it."""
    sentinel = {"status": "404", "reason": "unknown_url"}
    wanted = scrape(url).get(ANSWERS, **sentinel) + 1
    assert httpx.get(url + "/v1/settle-the-counts", timeout=30).status_code == 404
    return scrape_until(url, lambda s: s.get(ANSWERS, **sentinel) >= wanted, "the counts so far")


def counting_from_zero(url: str, redis_url: str) -> None:
    """The counters empty, with nothing a previous test's requests counted still to come: a
    gateway process flushes its counts about once a second, maybe after this test's Redis was
    emptied."""
    settled(url)
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def ask(url: str, member: Member, max_tokens: int = 5) -> httpx.Response:
    """One non-streamed chat completion through the gateway at `url`."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "ignore_eos": True}
    return httpx.post(
        url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {member.secret}"}, timeout=30
    )
