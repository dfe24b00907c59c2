"""A key issued through the admin API charges the account it names, which must be one of its
owner's; naming none charges the owner's default. Every key shows the account it charges."""

from __future__ import annotations

import json

import pytest

from fairness.actions import accounts
from fairness.gateway.associations import association_of
from fairness.models import ApiKey, AuditEntry
from tests.support.audit import SETUP

pytestmark = pytest.mark.django_db(transaction=True)


def issue(client, **body):
    return client.post("/api/admin/keys", data=json.dumps({"tier": "batch", **body}), content_type="application/json")


def test_a_key_charges_the_account_it_names(staff_client, tree, people):
    accounts.add_member(SETUP, tree.other, people["alice"])  # alice's second account, not her default
    response = issue(staff_client, owner="alice", account="other")
    assert response.status_code == 201, response.content
    assert response.json()["key"]["account"] == "other"
    key = ApiKey.objects.get(prefix=response.json()["key"]["prefix"])
    assert key.membership.account == tree.other and key.membership.user == people["alice"]
    assert association_of(key)[0] == str(key.membership_id)
    assert AuditEntry.objects.get(action="key.issue", target=key.prefix).detail["account"] == "other"


def test_a_key_naming_no_account_charges_the_owners_default(staff_client, tree):
    response = issue(staff_client, owner="alice")
    assert response.status_code == 201
    assert response.json()["key"]["account"] == "lab"


def test_an_account_the_owner_is_not_in_is_a_400(staff_client, tree):
    response = issue(staff_client, owner="carol", account="lab")
    assert response.status_code == 400
    assert response.json() == {"detail": "account: 'carol' is not a member of 'lab'; add them with "
                                          "POST /api/admin/accounts/lab/members first"}
    assert not ApiKey.objects.exists() and not AuditEntry.objects.filter(action="key.issue").exists()


def test_an_unknown_account_is_a_422_naming_the_field(staff_client, tree):
    response = issue(staff_client, owner="carol", account="nowhere")
    assert response.status_code == 422
    assert response.json() == {"detail": "account: no account named 'nowhere'"}
    assert not ApiKey.objects.exists()


def test_the_listing_and_a_rotation_show_the_account(staff_client, tree):
    prefix = issue(staff_client, owner="bob", account="lab").json()["key"]["prefix"]
    listed = {k["prefix"]: k for k in staff_client.get("/api/admin/keys").json()}
    assert listed[prefix]["account"] == "lab"
    rotated = staff_client.post(f"/api/admin/keys/{prefix}/rotate", data="{}", content_type="application/json")
    assert rotated.json()["key"]["account"] == "lab"
