"""Researchers' own keys: alice (interactive, a live key) and bob on their signed-in pages (the
forms are posted as the rendered pages would, by tests/support/key_forms.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.key_forms import signed_in


@pytest.fixture(autouse=True)
def clean_cache(redis_url: str) -> None:
    """Submitted forms, sign-in limits and live load live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def alice(cast) -> Client:
    return signed_in("alice")


@pytest.fixture
def bob(cast) -> Client:
    return signed_in("bob")
