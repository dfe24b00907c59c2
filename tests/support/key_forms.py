"""Researchers' key forms posted as the rendered pages post them: a client signed in as one of the
cast, the form's fields with a fresh submit-once token, and the secret the page shows once."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import ApiKey, Membership
from fairness.portal.submit_once import new_token

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')
User = get_user_model()


def key_form(**fields) -> dict:
    """A key form's fields with a fresh submit-once token, as the rendered form carries."""
    return {**fields, "once": new_token()}


def signed_in(username: str, **client_options) -> Client:
    client = Client(**client_options)
    client.force_login(User.objects.get(username=username))
    return client


def default_membership_of(username: str) -> Membership:
    key = ApiKey.objects.filter(owner__username=username).select_related("membership").first()
    assert key is not None and key.membership is not None
    return key.membership


def make_key(client: Client, label: str = "laptop", expires_days: int | str = 30, **fields) -> tuple[str, object]:
    """Posts the new-key form; (the secret, the response), the secret "" when none was shown."""
    response = client.post("/me/keys/", {"label": label, "expires_days": expires_days, "once": new_token(), **fields})
    found = SECRET.search(response.content.decode())
    return (found.group(1) if found else ""), response
