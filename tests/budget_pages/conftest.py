"""Budgets over a small tree: `lab` with `nlp` under it, alice in nlp (her default) and bob in
lab. Usage is put straight into admission's counters, as a gateway's release would leave it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest
import redis
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.audit import Actor
from fairness.models import Account, ApiKey, Budget, Membership
from fairness.store import keyspace
from fairness.telemetry import budget_status
from tests.support.redis_db import TEST_REDIS_URL

SETUP = Actor(None, name="test-setup")


@pytest.fixture(autouse=True)
def clean_redis(redis_url: str) -> None:
    """Budget counters, sign-in limits and the cache live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


@dataclass
class Tree:
    lab: Account
    nlp: Account
    alice: Membership  # alice in nlp, her default
    bob: Membership  # bob in lab, his default


@pytest.fixture
def tree(cast) -> Tree:
    lab = accounts.add_account(SETUP, "lab", shares=2)
    nlp = accounts.add_account(SETUP, "nlp", parent=lab)
    users = get_user_model().objects
    alice = accounts.add_member(SETUP, nlp, users.get(username="alice"), default=True)
    bob = accounts.add_member(SETUP, lab, users.get(username="bob"), default=True)
    ApiKey.objects.filter(owner__username="alice").update(membership=alice)
    ApiKey.objects.filter(owner__username="bob").update(membership=bob)
    return Tree(lab, nlp, alice, bob)


def use(budget: Budget, used: float, reserved: float = 0.0) -> None:
    """Settled and reserved weighted tokens in the budget's current window."""
    now = dt.datetime.now(dt.UTC).timestamp()
    window = budget_status.window_of(budget, now)
    namespace = keyspace.admission_namespace(keyspace.PREFIX)
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        assert not window.rolling_seconds, "a calendar budget's single counter only"
        client.hset(namespace + keyspace.ADMISSION_BUDGET_WINDOW + window.field, mapping={
            keyspace.ADMISSION_FIELD_BUDGET_SETTLED: repr(used),
            keyspace.ADMISSION_FIELD_BUDGET_RESERVED: repr(reserved),
        })
    finally:
        client.close()
