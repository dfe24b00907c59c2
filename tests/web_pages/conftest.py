"""The cast signed in to the pages: sam is staff, alice a researcher."""

from __future__ import annotations

import pytest

from fairness.portal.submit_once import new_token


@pytest.fixture(autouse=True)
def clean_cache(redis_url: str) -> None:
    """Sign-in limits and live load live in Redis: start each test from nothing."""
    from django.core.cache import cache

    cache.clear()


def key_form(**fields) -> dict:
    """A key form's fields with a fresh submit-once token, as the rendered form carries."""
    return {**fields, "once": new_token()}
