"""Lab managers: staff make a member the manager of an account; the manager looks after its
members, keys, sub-accounts, shares and budgets from /me/lab/, and crosses none of the
boundaries: another account, staff's powers, or what staff gave the account."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from fairness.actions import budgets, lab_managers
from fairness.actions.audit import Actor
from fairness.models import Account, ApiKey, AuditEntry, Budget, GroupMapping, Membership, Tier
from tests.support.audit import SETUP

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')


@pytest.fixture
def manager(tree, people) -> Client:
    """alice manages lab; lab's members get interactive keys of their own making."""
    lab_managers.set_manager(SETUP, tree.alice, True)
    interactive = Tier.objects.get(name="interactive")
    Tier.objects.filter(pk=interactive.pk).update(self_service_keys=True)
    GroupMapping.objects.create(group="cn=lab", account=tree.lab, tier=interactive)
    client = Client(REMOTE_ADDR="127.0.0.9")
    client.force_login(people["alice"])
    return client


def post(client: Client, account: str, **fields: object):
    return client.post(f"/me/lab/{account}/", fields)


def test_staff_make_a_manager_through_the_admin_api_and_it_is_audited(staff_client, tree):
    response = staff_client.post("/api/admin/accounts/lab/members", content_type="application/json",
                                 data=json.dumps({"username": "bob", "manager": True}))
    assert response.status_code == 200, response.content
    assert response.json()["is_manager"] is True
    assert Membership.objects.get(pk=tree.bob.pk).is_manager
    assert AuditEntry.objects.filter(action="account.set_manager", target="lab", detail__user="bob").exists()


def test_a_manager_adds_a_member_sets_shares_and_removes_one_as_themselves_in_the_audit_log(manager, tree, people):
    assert post(manager, "lab", op="add_member", username="carol", shares=2).status_code == 302
    carol = Membership.objects.get(account=tree.lab, user=people["carol"])
    assert carol.shares == 2
    assert post(manager, "lab", op="member_shares", target=tree.bob.pk, shares=5).status_code == 302
    assert Membership.objects.get(pk=tree.bob.pk).shares == 5
    assert post(manager, "lab", op="remove_member", target=carol.pk).status_code == 302
    assert not Membership.objects.filter(pk=carol.pk).exists()
    made = AuditEntry.objects.filter(actor_name="alice").values_list("action", flat=True)
    assert {"account.add_member", "account.remove_member"} <= set(made)
    page = manager.get("/me/lab/lab/").content.decode()
    assert "bob" in page and "Weighted" in page


def test_an_unknown_or_deactivated_user_cannot_be_added(manager, people):
    people["carol"].is_active = False
    people["carol"].save()
    for name in ("carol", "nobody"):
        response = post(manager, "lab", op="add_member", username=name, shares=1)
        assert response.status_code == 400
        assert "No active user named" in response.content.decode()


def test_a_manager_sees_and_touches_no_other_account(manager, tree, people):
    assert manager.get("/me/lab/other/").status_code == 404  # like an account that does not exist
    assert post(manager, "other", op="add_member", username="bob", shares=1).status_code == 404
    # A membership of another account named from the managed account's page is not found.
    assert post(manager, "lab", op="remove_member", target=tree.carol.pk).status_code == 404
    assert Membership.objects.filter(pk=tree.carol.pk).exists()
    with pytest.raises(PermissionDenied):
        lab_managers.add_member(Actor(people["alice"]), tree.other, "bob")
    with pytest.raises(PermissionDenied):
        lab_managers.set_member_shares(Actor(people["alice"]), tree.carol, 9)


def test_a_member_who_manages_nothing_has_no_manager_pages(tree, people):
    client = Client()
    client.force_login(people["bob"])
    assert client.get("/me/lab/").status_code == 404
    assert client.get("/me/lab/lab/").status_code == 404
    assert post(client, "lab", op="add_member", username="carol", shares=1).status_code == 404
    assert "Accounts you manage" not in client.get("/me/").content.decode()


def test_a_deactivated_manager_manages_nothing(manager, people):
    people["alice"].is_active = False
    people["alice"].save()
    assert lab_managers.managed(people["alice"]) == []


def test_a_manager_has_none_of_staffs_powers(manager, tree, people):
    assert manager.get("/staff/accounts/").status_code in (302, 403)
    assert manager.post("/api/admin/accounts/lab/members", content_type="application/json",
                        data=json.dumps({"username": "bob", "manager": True})).status_code in (401, 403)
    assert not Membership.objects.get(pk=tree.bob.pk).is_manager
    # Another manager's membership is staff's to change.
    lab_managers.set_manager(SETUP, tree.bob, True)
    response = post(manager, "lab", op="remove_member", target=tree.bob.pk)
    assert response.status_code == 400 and "staff change a manager" in response.content.decode()
    assert Membership.objects.filter(pk=tree.bob.pk).exists()
    # The account's own share of its parent, and its own budget, are staff's.
    with pytest.raises(PermissionDenied):
        lab_managers.set_sub_account_shares(Actor(people["alice"]), tree.lab, 100)
    with pytest.raises(PermissionDenied):
        lab_managers.set_budget(Actor(people["alice"]), tree.lab, 10**9, "month")
    assert Account.objects.get(pk=tree.lab.pk).shares == 3


def test_sub_accounts_are_managed_and_their_budgets_stay_within_what_staff_gave(manager, tree, people):
    budgets.set_budget(SETUP, account=tree.lab, tokens=1000, period="month")
    assert post(manager, "lab", op="add_sub_account", name="nlp", shares=2).status_code == 302
    nlp = Account.objects.get(name="nlp")
    assert nlp.parent == tree.lab
    assert manager.get("/me/lab/nlp/").status_code == 200  # managed, as everything under lab
    assert post(manager, "lab", op="sub_account_shares", target=nlp.pk, shares=4).status_code == 302
    assert Account.objects.get(pk=nlp.pk).shares == 4

    too_much = post(manager, "lab", op="budget", holder=f"a{nlp.pk}", tokens=2000, period="month")
    assert too_much.status_code == 400 and "At most 1,000" in too_much.content.decode()
    member_too_much = post(manager, "lab", op="budget", holder=f"m{tree.bob.pk}", tokens=1001, period="month")
    assert member_too_much.status_code == 400
    assert not Budget.objects.exclude(account=tree.lab).exists()
    assert post(manager, "lab", op="budget", holder=f"a{nlp.pk}", tokens=600, period="month").status_code == 302
    assert post(manager, "lab", op="budget", holder=f"m{tree.bob.pk}", tokens=300, period="day").status_code == 302
    assert Budget.objects.get(account=nlp).tokens == 600
    assert Budget.objects.get(membership=tree.bob).tokens == 300
    # The account's own budget cannot be removed from its manager's page; a member's can.
    staffs = Budget.objects.get(account=tree.lab)
    assert post(manager, "lab", op="remove_budget", target=staffs.pk).status_code == 400
    assert Budget.objects.filter(pk=staffs.pk).exists()
    members = Budget.objects.get(membership=tree.bob)
    assert post(manager, "lab", op="remove_budget", target=members.pk).status_code == 302
    # Another account's budget is out of reach.
    others = budgets.set_budget(SETUP, account=tree.other, tokens=5, period="day")
    assert post(manager, "lab", op="remove_budget", target=others.pk).status_code == 400
    assert Budget.objects.filter(pk=others.pk).exists()


def test_a_manager_issues_a_member_a_key_on_their_tier_and_revokes_it(manager, tree, people):
    response = post(manager, "lab", op="issue_key", member=tree.bob.pk, label="eval", expires_days=30,
                    once="a" * 32)
    assert response.status_code == 200, response.content
    secret = SECRET.search(response.content.decode()).group(1)
    key = ApiKey.objects.get(owner=people["bob"])
    assert key.membership_id == tree.bob.pk and key.tier.name == "interactive"
    assert key.created_by == people["alice"]
    assert secret not in manager.get("/me/lab/lab/").content.decode()
    assert post(manager, "lab", op="revoke_key", target=key.prefix).status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


def test_a_manager_revokes_no_key_that_charges_another_account(manager, tree, people):
    from fairness.actions.keys import issue

    carols, _ = issue(SETUP, people["carol"], Tier.objects.get(name="batch"), membership=tree.carol)
    assert post(manager, "lab", op="revoke_key", target=carols.prefix).status_code == 404
    assert ApiKey.objects.get(pk=carols.pk).revoked_at is None
    with pytest.raises(PermissionDenied):
        lab_managers.revoke_key(Actor(people["alice"]), carols)


def test_a_key_for_a_member_follows_the_tiers_rules(manager, tree, people):
    Tier.objects.filter(name="interactive").update(self_service_keys=False)
    response = post(manager, "lab", op="issue_key", member=tree.bob.pk, label="eval", once="b" * 32)
    assert response.status_code == 400 and "managed by staff" in response.content.decode()
    assert not ApiKey.objects.filter(owner=people["bob"]).exists()


def test_the_add_member_command_makes_and_unmakes_a_manager(tree):
    from django.core.management import call_command

    call_command("add_member", "lab", "bob", "--manager")
    assert Membership.objects.get(pk=tree.bob.pk).is_manager
    call_command("add_member", "lab", "bob", "--no-manager")
    assert not Membership.objects.get(pk=tree.bob.pk).is_manager


def test_staff_make_a_manager_on_the_member_form_and_the_tree_says_so(staff_client, tree):
    form = staff_client.get("/staff/accounts/members/new/?user=bob&account=lab&shares=1")
    assert form.status_code == 200 and form.context["form"]["manager"].initial is False
    response = staff_client.post("/staff/accounts/members/new/",
                                 {"user": "bob", "account": "lab", "shares": 1, "manager": "on"})
    assert response.status_code == 302, response.content
    assert Membership.objects.get(pk=tree.bob.pk).is_manager
    assert staff_client.get("/staff/accounts/members/new/?user=bob&account=lab").context["form"]["manager"].initial
    assert 'badge">manager' in staff_client.get("/staff/accounts/").content.decode()
    # Changing their shares with the form as filled in keeps them a manager.
    staff_client.post("/staff/accounts/members/new/", {"user": "bob", "account": "lab", "shares": 2, "manager": "on"})
    assert Membership.objects.get(pk=tree.bob.pk).is_manager
