"""A small fair-share tree over the cast, usage charged the way the gateways charge it.

The cast's keys gave alice, bob and carol an account each (at the top, 1 share); staff add
`lab` (2 shares) with `nlp` under it, and alice joins nlp as her default. So the top's shares
are 1 + 1 + 1 + 2 and alice's share S in nlp is 2/5 = 40%."""

from __future__ import annotations

import pytest

from tests.support.accounts import LabTree, lab_tree


@pytest.fixture(autouse=True)
def clean_redis(redis_url: str) -> None:
    """Usage, sign-in limits and the cache live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def tree(cast) -> LabTree:
    return lab_tree()
