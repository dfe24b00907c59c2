"""The pages through Django's test client (the cast signed in by the shared fixtures: sam is staff,
alice a researcher), each test from an empty Redis."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def clean_cache(redis_url: str) -> None:
    """Sign-in limits and live load live in Redis: start each test from nothing."""
    from django.core.cache import cache

    cache.clear()
