"""A request whose body makes the engine fail is that request's error, not everyone's outage;
failures of several users still take a failing replica out, whichever gateway saw them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica
from fairness.store import keyspace
from tests.support.cast import MODEL, Member
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import start_gateway

POISON = "POISON-5c1e"


def chat(gateway: GatewayProcess, member: Member, content: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4},
        headers={"authorization": f"Bearer {member.secret}"},
        timeout=30,
    )


@pytest.fixture
def poisonable(redis_url: str, cast: dict[str, Member]) -> Iterator[EngineSimProcess]:
    """The only replica of the model; it answers 500 to any request whose body holds POISON."""
    with start_enginesim(model=MODEL, max_num_seqs=8,
                         extra_args=["--speed", "20", "--error-500-marker", POISON]) as engine:
        Replica.objects.create(name="poisonable", base_url=engine.url, model=MODEL, max_num_seqs=8)
        yield engine


@pytest.fixture
def gateways(live_db_url: str, poisonable: EngineSimProcess) -> Iterator[Callable[..., GatewayProcess]]:
    """Gateways that probe /health once at start and then not for a minute (the session's own
    gateway, probing every replica, may still probe this one: its probes leave "failing" alone)."""
    started: list[GatewayProcess] = []

    def start(name: str, **env: str) -> GatewayProcess:
        started.append(start_gateway(live_db_url, name=name, GP_HEALTH_INTERVAL_SECONDS="60",
                                     GP_HEALTH_COOLDOWN_SECONDS="60", **env))
        return started[-1]

    yield start
    for gateway in started:
        gateway.stop()


def test_one_users_poisoned_requests_fail_alone_while_others_are_served(gateways, cast):
    gateway = gateways("poisoned")
    for attempt in range(8):  # far more than the failures of different users that mark it down
        poisoned = chat(gateway, cast["alice"], f"please repeat {POISON} ({attempt})")
        assert poisoned.status_code == 502, poisoned.text
        assert poisoned.json()["error"]["code"] == "upstream_error"
        normal = chat(gateway, cast["bob"], f"hello ({attempt})")
        assert normal.status_code == 200, normal.text


def test_failures_of_three_users_mark_the_replica_down_counted_across_gateways(gateways, cast, poisonable,
                                                                                redis_client: redis.Redis):
    first, second = gateways("first"), gateways("second")
    verdict = keyspace.health_verdict("poisonable", poisonable.url)
    assert chat(first, cast["alice"], POISON).status_code == 502
    assert chat(first, cast["bob"], POISON).status_code == 502
    assert chat(second, cast["alice"], "hello").status_code == 200  # two users so far: still up
    assert redis_client.get(verdict) in (None, b"up")  # probed up, or not yet probed

    assert chat(second, cast["carol"], POISON).status_code == 502  # a third user, another gateway
    assert redis_client.get(verdict) == b"failing"
    refused = chat(second, cast["alice"], "hello")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "no_healthy_replica"


def test_timeouts_of_three_users_mark_the_replica_down(gateways, cast, poisonable, redis_client: redis.Redis):
    gateway = gateways("impatient", GP_UPSTREAM_READ_TIMEOUT="0.5")
    verdict = keyspace.health_verdict("poisonable", poisonable.url)
    poisonable.set_faults(stall=True)  # reads every request, never answers
    for index, name in enumerate(("alice", "alice", "bob", "carol")):
        timed_out = chat(gateway, cast[name], "hello")
        assert timed_out.status_code == 504, timed_out.text
        assert (redis_client.get(verdict) == b"failing") is (index == 3)  # the third user's tips it
    refused = chat(gateway, cast["alice"], "hello")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_healthy_replica"
