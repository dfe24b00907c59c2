"""Budgets over a small tree: `lab` with `nlp` under it, alice in nlp (her default) and bob in
lab, their keys charging those memberships. Usage is put straight into admission's counters, as a
gateway's release would leave it (tests/support/budgets.py)."""

from __future__ import annotations

import pytest

from tests.support.accounts import LabTree, lab_tree


@pytest.fixture(autouse=True)
def clean_redis(redis_url: str) -> None:
    """Budget counters, sign-in limits and the cache live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def tree(cast) -> LabTree:
    return lab_tree(bob_in_lab=True, keys_in_tree=True)
