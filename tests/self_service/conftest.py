"""Researchers' own keys: alice (interactive, a live key) on her signed-in page; helpers that
post the forms as the rendered pages would."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import ApiKey, Membership
from fairness.portal.submit_once import new_token

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')
User = get_user_model()


@pytest.fixture(autouse=True)
def clean_cache(redis_url: str) -> None:
    """Submitted forms, sign-in limits and live load live in Redis: each test starts from nothing."""
    from django.core.cache import cache

    cache.clear()


def signed_in(username: str, **client_options) -> Client:
    client = Client(**client_options)
    client.force_login(User.objects.get(username=username))
    return client


@pytest.fixture
def alice(cast) -> Client:
    return signed_in("alice")


@pytest.fixture
def bob(cast) -> Client:
    return signed_in("bob")


def default_membership_of(username: str) -> Membership:
    key = ApiKey.objects.filter(owner__username=username).select_related("membership").first()
    assert key is not None and key.membership is not None
    return key.membership


def make_key(client: Client, label: str = "laptop", expires_days: int | str = 30, **fields) -> tuple[str, object]:
    """Posts the new-key form; (the secret, the response), the secret "" when none was shown."""
    response = client.post("/me/keys/", {"label": label, "expires_days": expires_days, "once": new_token(), **fields})
    found = SECRET.search(response.content.decode())
    return (found.group(1) if found else ""), response
