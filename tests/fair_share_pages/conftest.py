"""A small fair-share tree over the cast, usage charged the way the gateways charge it.

The cast's keys gave alice, bob and carol an account each (at the top, 1 share); staff add
`lab` (2 shares) with `nlp` under it, and alice joins nlp as her default. So the top's shares
are 1 + 1 + 1 + 2 and alice's share S in nlp is 2/5 = 40%."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
import redis.asyncio
from django.contrib.auth import get_user_model

from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.actions import accounts
from fairness.actions.audit import Actor
from fairness.gateway.associations import association_id
from fairness.models import Account, Membership
from fairness.scheduling.admission import Admission
from tests.support.redis_db import TEST_REDIS_URL

SETUP = Actor(None, name="test-setup")


@pytest.fixture(autouse=True)
def clean_redis(redis_url: str) -> None:
    """Usage, sign-in limits and the cache live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


@dataclass
class Tree:
    lab: Account
    nlp: Account
    alice: Membership  # alice in nlp, her default


@pytest.fixture
def tree(cast) -> Tree:
    lab = accounts.add_account(SETUP, "lab", shares=2)
    nlp = accounts.add_account(SETUP, "nlp", parent=lab, shares=1)
    alice = get_user_model().objects.get(username="alice")
    return Tree(lab, nlp, accounts.add_member(SETUP, nlp, alice, default=True))


def charge(membership: Membership, amount: float) -> None:
    """Weighted tokens charged to an association, as a gateway's release round trip does."""

    async def send() -> None:
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client, half_life_seconds=half_life_seconds())
        try:
            await admission.send(admission.charge_command(association_id(membership.pk), amount))
        finally:
            await admission.close()
            await client.aclose()

    asyncio.run(send())
