"""A known tree with keys charging it, and a helper that writes usage records as the worker does.

lab (top) holds alice and, under it, proj holding bob; other (top) holds carol. Every key names
its association, so nobody gets an account of their own behind the test's back."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.audit import Actor
from fairness.actions.keys import issue_key
from fairness.models import Account, ApiKey, UsageRecord

SETUP = Actor(None, name="test-setup")
_ids = itertools.count(1)

# A day well inside the records' retention would move with the clock; reports take explicit dates.
DAY = dt.date(2031, 3, 10)
NOON = dt.datetime.combine(DAY, dt.time(12), dt.UTC)


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


def record(key: ApiKey, *, at: dt.datetime = NOON, prompt: int = 10, completion: int = 20, queued_ms: int = 0,
           ttft_ms: int | None = 100, status: int = 200, model: str = "sim", tier: str | None = None) -> UsageRecord:
    return UsageRecord.objects.create(
        key=key, request_id=f"req-{next(_ids)}", endpoint="chat/completions", model=model, status=status,
        prompt_tokens=prompt, completion_tokens=completion, queued_ms=queued_ms, ttft_ms=ttft_ms,
        latency_ms=500, tier=key.tier.name if tier is None else tier, created_at=at,
    )
