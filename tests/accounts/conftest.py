"""A known tree, usage charged the way the gateways charge it, and staff's admin token.

The users here have no keys: issuing one gives a user in no account an account of their own,
which would add a top-level sibling to every figure below."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
import redis.asyncio
from django.contrib.auth import get_user_model

from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.actions import accounts
from fairness.actions.audit import Actor
from fairness.actions.tokens import issue_admin_token
from fairness.gateway.associations import association_id
from fairness.models import Account, Membership
from fairness.scheduling.admission import Admission
from tests.support.redis_db import TEST_REDIS_URL

SETUP = Actor(None, name="test-setup")


@pytest.fixture(autouse=True)
def no_usage_yet(redis_url: str) -> None:
    """Usage lives in Redis: every test starts from none."""


@pytest.fixture
def admin_token(staff) -> str:
    return issue_admin_token(Actor(staff), staff, "ci")[1]


@pytest.fixture
def people(tiers) -> dict:
    """alice, bob and carol, with no account yet."""
    User = get_user_model()
    return {name: User.objects.create_user(name) for name in ("alice", "bob", "carol")}


@dataclass
class Tree:
    """lab (3 shares: alice and bob, 1 each) and other (1 share: carol)."""

    lab: Account
    other: Account
    alice: Membership
    bob: Membership
    carol: Membership


@pytest.fixture
def tree(people) -> Tree:
    lab = accounts.add_account(SETUP, "lab", shares=3)
    other = accounts.add_account(SETUP, "other", shares=1)
    return Tree(lab, other, accounts.add_member(SETUP, lab, people["alice"]),
                accounts.add_member(SETUP, lab, people["bob"]), accounts.add_member(SETUP, other, people["carol"]))


def charge(*amounts: tuple[Membership, float]) -> None:
    """Charge weighted tokens to associations, as a gateway's release round trip does."""

    async def send() -> None:
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client, half_life_seconds=half_life_seconds())
        try:
            await admission.send(*(admission.charge_command(association_id(m.pk), a) for m, a in amounts))
        finally:
            await admission.close()
            await client.aclose()

    asyncio.run(send())
