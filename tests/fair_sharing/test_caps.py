"""Caps hold under concurrency, across several gateway processes, measured at the engine."""

import asyncio
import itertools

import httpx
import pytest
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import Replica, Tier
from tests.support.cast import MODEL, Member
from tests.support.live_admission import chat_body, nothing_held, peak_overlap, send
from tests.support.polling import wait_for
from tests.support.processes import start_gateway


@pytest.fixture
def crowd(tiers) -> list[Member]:
    """Seven interactive keys and three batch keys, each allowed a deep queue."""
    Tier.objects.update(max_queued_per_key=64)
    Tier.objects.filter(name="batch").update(borrow_idle_slots=False)
    members = []
    for index in range(10):
        tier = tiers["interactive"] if index < 7 else tiers["batch"]
        tier.refresh_from_db()
        user = get_user_model().objects.create(username=f"{tier.name}-{index}")
        key, secret = issue_key(user, tier)
        members.append(Member(user.username, tier.name, secret, key.pk))
    return members


def test_no_key_pool_or_engine_ever_exceeds_its_cap(live_db_url, redis_url, crowd, engine8):
    Replica.objects.create(name="sim-8", base_url=engine8.url, model=MODEL, max_num_seqs=8)
    gateways = [start_gateway(live_db_url, name=f"caps-{i}") for i in range(3)]
    try:
        async def flood():
            limits = httpx.Limits(max_connections=300)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                jobs = []
                for n, (member, gateway) in enumerate(zip(itertools.cycle(crowd), itertools.cycle(gateways))):
                    if n == 200:
                        break
                    # ~0.1 s each in the engine: long enough that a busy host cannot leave the
                    # slots idle between grants, which the last check below would read as waste.
                    body = chat_body(member, max_tokens=200, stream=n % 2 == 0)
                    jobs.append(send(client, gateway.url, member, body))
                return await asyncio.gather(*jobs)

        responses = asyncio.run(flood())
        assert [r.status_code for r in responses] == [200] * 200

        log = engine8.requests()
        assert len(log) == 200
        assert peak_overlap(log) <= 8
        for member in crowd:
            assert peak_overlap([e for e in log if e["user"] == member.username]) <= 2, member.username
        assert peak_overlap([e for e in log if e["user"].startswith("batch")]) <= 2
        # The engine was kept busy: fairness must not cost throughput.
        assert peak_overlap(log) == 8
        wait_for(nothing_held, timeout=10, what="every lease and ticket to be given back")
    finally:
        for gateway in gateways:
            gateway.stop()
