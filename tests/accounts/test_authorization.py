"""The accounts endpoints are staff's: nobody else may read the standings or change the tree,
whether anonymous, signed in as a researcher, or holding a researcher's API key."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from fairness.models import Account, Membership

pytestmark = pytest.mark.django_db(transaction=True)

ENDPOINTS = [
    ("get", "/api/admin/accounts", None),
    ("post", "/api/admin/accounts", {"name": "mine", "shares": 1000}),
    ("patch", "/api/admin/accounts/alice", {"shares": 1000}),
    ("post", "/api/admin/accounts/alice/members", {"username": "bob", "shares": 1000}),
]


def call(client: Client, method: str, path: str, body, **extra):
    if body is None:
        return getattr(client, method)(path, **extra)
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **extra)


def tree_now() -> list:
    return [list(Account.objects.values_list("name", "parent", "shares")),
            list(Membership.objects.values_list("account", "user", "shares", "is_default"))]


@pytest.fixture
def callers(cast, researcher_client) -> dict[str, tuple[Client, dict]]:
    return {
        "no token": (Client(), {}),
        "a researcher's session": (researcher_client, {}),
        "a researcher's API key": (Client(), {"HTTP_AUTHORIZATION": f"Bearer {cast['alice'].secret}"}),
        "a made-up admin token": (Client(), {"HTTP_AUTHORIZATION": "Bearer gpa-not-a-real-token-at-all"}),
    }


@pytest.mark.parametrize("caller", ["no token", "a researcher's session", "a researcher's API key",
                                    "a made-up admin token"])
@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_only_staff_may_read_or_change_accounts(callers, caller, method, path, body):
    client, headers = callers[caller]
    before = tree_now()
    response = call(client, method, path, body, **headers)
    assert response.status_code == 401, response.content
    assert "fair_share" not in response.content.decode()
    assert tree_now() == before


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_staff_with_an_admin_token_are_served(cast, admin_token, method, path, body):
    response = call(Client(), method, path, body, HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    assert response.status_code in (200, 201), response.content


def test_a_staff_session_needs_the_csrf_token_to_write(staff, cast):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert call(client, "post", "/api/admin/accounts", {"name": "lab"}).status_code == 403
    assert not Account.objects.filter(name="lab").exists()
