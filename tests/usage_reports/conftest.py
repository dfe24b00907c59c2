"""A known tree with keys charging it (tests/support/usage_records.py writes usage records as the
worker does).

lab (top) holds alice and, under it, proj holding bob; other (top) holds carol. Every key names
its association, so nobody gets an account of their own behind the test's back."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.keys import issue_key
from fairness.models import Account, ApiKey
from tests.support.audit import SETUP


@dataclass
class Tree:
    lab: Account
    proj: Account
    other: Account
    alice: ApiKey
    bob: ApiKey
    carol: ApiKey
    carol_batch: ApiKey  # carol's second key, on the batch tier


@pytest.fixture
def tree(tiers) -> Tree:
    User = get_user_model()
    alice, bob, carol = (User.objects.create_user(name) for name in ("alice", "bob", "carol"))
    lab = accounts.add_account(SETUP, "lab", shares=3)
    proj = accounts.add_account(SETUP, "proj", parent=lab)
    other = accounts.add_account(SETUP, "other")
    m_alice = accounts.add_member(SETUP, lab, alice)
    m_bob = accounts.add_member(SETUP, proj, bob)
    m_carol = accounts.add_member(SETUP, other, carol)
    return Tree(
        lab, proj, other,
        issue_key(alice, tiers["interactive"], membership=m_alice)[0],
        issue_key(bob, tiers["interactive"], membership=m_bob)[0],
        issue_key(carol, tiers["interactive"], membership=m_carol)[0],
        issue_key(carol, tiers["batch"], membership=m_carol)[0],
    )
