"""A known tree (usage is charged to it by tests/support/accounts.py).

The users here have no keys: issuing one gives a user in no account an account of their own,
which would add a top-level sibling to every figure below."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.models import Account, Membership
from tests.support.audit import SETUP


@pytest.fixture(autouse=True)
def no_usage_yet(redis_url: str) -> None:
    """Usage lives in Redis: every test starts from none."""


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
