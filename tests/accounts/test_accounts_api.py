"""The admin API's accounts: sshare's rows, and the tree changed through the audited actions with
the API's usual answers (201 made, 409 taken, 404 unknown path, 422 naming the field)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from fairness.models import Account, AuditEntry, Membership
from tests.support.accounts import charge
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)


def send(client, method: str, path: str, body: dict):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def test_the_listing_is_sshares_rows(staff_client, tree):
    charge((tree.alice, 300.0), (tree.carol, 100.0))
    response = staff_client.get("/api/admin/accounts")
    assert response.status_code == 200
    rows = response.json()
    assert [(r["account"], r["user"], r["depth"], r["raw_shares"]) for r in rows] == [
        ("lab", "", 0, 3), ("lab", "alice", 1, 1), ("lab", "bob", 1, 1), ("other", "", 0, 1), ("other", "carol", 1, 1),
    ]
    alice = rows[1]
    assert alice["norm_shares"] == pytest.approx(0.375)
    assert alice["effective_usage"] == pytest.approx(0.75, rel=1e-4)
    assert alice["fair_share"] == pytest.approx(0.25, rel=1e-4)
    assert set(alice) == {"account", "user", "depth", "raw_shares", "norm_shares", "raw_usage", "norm_usage",
                          "effective_usage", "fair_share", "level_fs"}
    assert alice["level_fs"] == pytest.approx(0.5 / 1.0, rel=1e-4)  # half of lab's shares, all of lab's usage
    assert rows[2]["level_fs"] is None  # bob used nothing: infinitely under his share


def test_the_listing_and_the_command_give_the_same_rows(staff_client, tree, capsys):
    call_command("sshare", "--json")
    assert staff_client.get("/api/admin/accounts").json() == json.loads(capsys.readouterr().out)


def test_the_document_explains_the_formula(staff_client):
    operation = staff_client.get("/api/openapi.json").json()["paths"]["/api/admin/accounts"]["get"]
    assert "F = 2^(-U/S)" in operation["summary"] and "F = 2^(-U/S)" in operation["description"]


def test_staff_create_an_account_under_another_audited(staff_client, tree):
    response = send(staff_client, "post", "/api/admin/accounts",
                    {"name": "proj", "parent": "lab", "shares": 2, "description": "A project"})
    assert response.status_code == 201, response.content
    assert response.json() == {"name": "proj", "parent": "lab", "shares": 2, "description": "A project",
                               "allowed_models": []}
    assert Account.objects.get(name="proj").parent == tree.lab
    entry = AuditEntry.objects.get(action="account.add", target="proj")
    assert (entry.actor_name, entry.ip, entry.detail) == ("sam", STAFF_IP, {"parent": "lab", "shares": 2})


def test_an_account_at_the_top_takes_the_defaults(staff_client, people):
    response = send(staff_client, "post", "/api/admin/accounts", {"name": "lab"})
    assert response.status_code == 201
    assert response.json() == {"name": "lab", "parent": None, "shares": 1, "description": "", "allowed_models": []}


def test_staff_change_shares_and_move_an_account(staff_client, tree):
    send(staff_client, "post", "/api/admin/accounts", {"name": "proj"})
    response = send(staff_client, "patch", "/api/admin/accounts/proj", {"shares": 4, "parent": "lab"})
    assert response.status_code == 200, response.content
    assert response.json()["parent"] == "lab" and response.json()["shares"] == 4
    entry = AuditEntry.objects.get(action="account.change")
    assert entry.detail == {"shares": [1, 4], "parent": [None, "lab"]}

    response = send(staff_client, "patch", "/api/admin/accounts/proj", {"shares": 5})  # parent left out: kept
    assert response.json()["parent"] == "lab" and response.json()["shares"] == 5
    response = send(staff_client, "patch", "/api/admin/accounts/proj", {"parent": None})  # null: to the top
    assert response.json()["parent"] is None and response.json()["shares"] == 5


def test_staff_add_members_and_switch_their_default(staff_client, tree):
    response = send(staff_client, "post", "/api/admin/accounts/other/members", {"username": "alice", "shares": 2})
    assert response.status_code == 201, response.content
    assert response.json() == {"account": "other", "username": "alice", "shares": 2, "is_default": False,
                               "is_manager": False}
    response = send(staff_client, "post", "/api/admin/accounts/other/members", {"username": "alice", "default": True})
    assert response.status_code == 200
    assert response.json() == {"account": "other", "username": "alice", "shares": 2, "is_default": True,
                               "is_manager": False}
    assert not Membership.objects.get(pk=tree.alice.pk).is_default
    entries = AuditEntry.objects.filter(action="account.add_member", actor_name="sam", target="other")
    assert entries.count() == 2


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("post", "/api/admin/accounts", {"name": "lab"}, 409, "name: an account named 'lab' exists"),
        ("post", "/api/admin/accounts", {"name": "x", "parent": "nowhere"}, 422, "parent: no account named"),
        ("post", "/api/admin/accounts", {"name": "has space"}, 422, "name"),
        ("post", "/api/admin/accounts", {"name": "x", "shares": 0}, 422, "shares"),
        ("post", "/api/admin/accounts", {"name": "x", "shares": 10**7}, 422, "shares"),
        ("post", "/api/admin/accounts", {"name": "x", "description": "a\x00b"}, 422, "NUL"),
        ("patch", "/api/admin/accounts/nothing", {"shares": 2}, 404, ""),
        ("patch", "/api/admin/accounts/lab", {"shares": 0}, 422, "shares"),
        ("patch", "/api/admin/accounts/lab", {"parent": "nowhere"}, 422, "parent: no account named"),
        ("patch", "/api/admin/accounts/lab", {"parent": "lab"}, 422, "parent: An account cannot sit under itself"),
        ("post", "/api/admin/accounts/nothing/members", {"username": "alice"}, 404, ""),
        ("post", "/api/admin/accounts/lab/members", {"username": "mallory"}, 422, "username: no user named"),
        ("post", "/api/admin/accounts/lab/members", {"username": "carol", "shares": -1}, 422, "shares"),
    ],
)
def test_mistakes_get_the_apis_usual_answers_and_change_nothing(staff_client, tree, method, path, body, status,
                                                                words):
    before = list(Account.objects.values_list("name", "parent", "shares")), Membership.objects.count()
    entries = AuditEntry.objects.count()
    response = send(staff_client, method, path, body)
    assert response.status_code == status, response.content
    assert "detail" in response.json() and words in response.content.decode()
    assert (list(Account.objects.values_list("name", "parent", "shares")), Membership.objects.count()) == before
    assert AuditEntry.objects.count() == entries


def test_a_move_under_its_own_descendant_is_refused(staff_client, tree):
    send(staff_client, "post", "/api/admin/accounts", {"name": "proj", "parent": "lab"})
    response = send(staff_client, "patch", "/api/admin/accounts/lab", {"parent": "proj"})
    assert response.status_code == 422
    assert response.json() == {"detail": "parent: An account cannot sit under itself."}
    assert Account.objects.get(name="lab").parent is None
