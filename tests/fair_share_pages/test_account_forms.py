"""The staff accounts page through the test client: the tree's figures, the three forms (each
change audited, each refusal shown on its field), and the door only staff pass."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import Account, AuditEntry, Membership
from tests.support.accounts import charge
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()


def row_of(html: str, name: str) -> str:
    """The table row whose header cell starts with `name`."""
    for row in re.findall(r"<tr class=\"(?:account|member)\"[^>]*>.*?</tr>", html, re.S):
        header = re.search(r"<th scope=\"row\"[^>]*>\s*([^\s<]+)", row)
        if header and header.group(1) == name:
            return row
    raise AssertionError(f"no row for {name}")


def test_the_tree_shows_each_nodes_share_usage_and_factor(staff_client, tree):
    charge((tree.alice, 1000.0))
    response = staff_client.get("/staff/accounts/")
    assert response.status_code == 200
    html = response.content.decode()
    nlp = row_of(html, "nlp")
    assert "40.0%" in nlp and "100.0%" in nlp  # S = 2/5 of the card; all of the usage
    assert "0.18" in nlp and "2.5× its share" in nlp  # F = 2^(-1/0.4)
    assert "under lab" in nlp and "--indent: 1.85rem" in nlp  # one level down
    alice = row_of(html, "alice")  # her own account first (name order), then her membership in nlp
    assert "1.00" in alice and "nothing used" in alice
    assert "F</var> = 2<sup>−<var>U</var>/<var>S</var></sup>" in html


def test_adding_an_account_is_audited(staff_client, tree):
    response = staff_client.post("/staff/accounts/new/", {"name": "vision", "parent": "lab", "shares": "3"})
    assert response.status_code == 302 and response["Location"] == "/staff/accounts/"
    vision = Account.objects.get(name="vision")
    assert vision.parent == tree.lab and vision.shares == 3
    entry = AuditEntry.objects.get(action="account.add", target="vision")
    assert entry.actor_name == "sam" and entry.ip == STAFF_IP
    assert entry.detail["parent"] == "lab" and entry.detail["shares"] == 3
    assert "Added account vision under lab" in staff_client.get("/staff/accounts/").content.decode()


def test_changing_an_accounts_shares_is_audited(staff_client, tree):
    response = staff_client.post("/staff/accounts/lab/shares/", {"shares": "5"})
    assert response.status_code == 302
    tree.lab.refresh_from_db()
    assert tree.lab.shares == 5
    entry = AuditEntry.objects.get(action="account.change", target="lab")
    assert entry.actor_name == "sam" and entry.detail["shares"] == [2, 5]


def test_adding_a_member_is_audited_and_may_make_it_their_default(staff_client, tree):
    response = staff_client.post("/staff/accounts/members/new/",
                                 {"user": "bob", "account": "nlp", "shares": "2", "default": "on"})
    assert response.status_code == 302
    bob = Membership.objects.get(user__username="bob", account=tree.nlp)
    assert bob.shares == 2 and bob.is_default
    assert Membership.objects.filter(user__username="bob", is_default=True).count() == 1
    entry = AuditEntry.objects.get(action="account.add_member", target="nlp", actor_name="sam")
    assert entry.ip == STAFF_IP and entry.detail["user"] == "bob" and entry.detail["default"] is True


def test_the_member_link_changes_shares_with_the_form_filled_in(staff_client, tree):
    form = staff_client.get("/staff/accounts/members/new/?user=alice&account=nlp&shares=1").content.decode()
    assert re.search(r'<option value="alice" selected>', form) and re.search(r'<option value="nlp" selected>', form)
    staff_client.post("/staff/accounts/members/new/", {"user": "alice", "account": "nlp", "shares": "4"})
    tree.alice.refresh_from_db()
    assert tree.alice.shares == 4 and tree.alice.is_default  # not ticking "default" keeps it


@pytest.mark.parametrize(("path", "fields", "field", "words"), [
    ("/staff/accounts/new/", {"name": "has space", "shares": "1"}, "name", "no spaces"),
    ("/staff/accounts/new/", {"name": "lab", "shares": "1"}, "name", "already exists"),
    ("/staff/accounts/new/", {"name": "vision", "shares": "0"}, "shares", "greater than or equal to 1"),
    ("/staff/accounts/new/", {"name": "vision", "parent": "nowhere", "shares": "1"}, "parent", "valid choice"),
    ("/staff/accounts/lab/shares/", {"shares": "-2"}, "shares", "greater than or equal to 1"),
    ("/staff/accounts/lab/shares/", {"shares": "many"}, "shares", "whole number"),
    ("/staff/accounts/members/new/", {"user": "nobody", "account": "nlp", "shares": "1"}, "user", "valid choice"),
    ("/staff/accounts/members/new/", {"user": "bob", "account": "nowhere", "shares": "1"}, "account",
     "valid choice"),
    ("/staff/accounts/members/new/", {"user": "bob", "account": "nlp", "shares": "0"}, "shares",
     "greater than or equal to 1"),
])
def test_a_refused_form_names_its_field_and_changes_nothing(staff_client, tree, path, fields, field, words):
    before = (list(Account.objects.values_list("name", "parent_id", "shares")),
              list(Membership.objects.values_list("account_id", "user_id", "shares", "is_default")),
              AuditEntry.objects.count())
    response = staff_client.post(path, fields)
    assert response.status_code == 200
    assert field in response.context["form"].errors
    html = response.content.decode()
    assert 'class="errorlist' in html and words in html
    assert 'aria-invalid="true"' in html
    assert before == (list(Account.objects.values_list("name", "parent_id", "shares")),
                      list(Membership.objects.values_list("account_id", "user_id", "shares", "is_default")),
                      AuditEntry.objects.count())


def test_a_deactivated_user_cannot_be_added(staff_client, tree):
    User.objects.filter(username="carol").update(is_active=False)
    response = staff_client.post("/staff/accounts/members/new/", {"user": "carol", "account": "nlp", "shares": "1"})
    assert response.status_code == 200 and "user" in response.context["form"].errors
    assert not Membership.objects.filter(user__username="carol", account=tree.nlp).exists()


def test_an_unknown_account_has_no_shares_page(staff_client, tree):
    assert staff_client.get("/staff/accounts/nowhere/shares/").status_code == 404
    assert staff_client.post("/staff/accounts/nowhere/shares/", {"shares": "2"}).status_code == 404


PAGES = ["/staff/accounts/", "/staff/accounts/new/", "/staff/accounts/lab/shares/", "/staff/accounts/members/new/"]
POSTS = [
    ("/staff/accounts/new/", {"name": "mine", "shares": "1"}),
    ("/staff/accounts/lab/shares/", {"shares": "100"}),
    ("/staff/accounts/members/new/", {"user": "alice", "account": "lab", "shares": "100", "default": "on"}),
]


def _unchanged(tree) -> bool:
    tree.lab.refresh_from_db()
    return (tree.lab.shares == 2 and not Account.objects.filter(name="mine").exists()
            and not Membership.objects.filter(account=tree.lab).exists()
            and not AuditEntry.objects.filter(actor_name__in=["alice", "sam", ""]).exists())


def test_a_researcher_can_neither_see_nor_post(researcher_client, tree):
    for path in PAGES:
        assert researcher_client.get(path).status_code == 403, path
    for path, body in POSTS:
        assert researcher_client.post(path, body).status_code == 403, path
    assert _unchanged(tree)
    assert 'href="/staff/accounts/"' not in researcher_client.get("/me/").content.decode()


def test_an_anonymous_visitor_is_sent_to_sign_in(tree):
    client = Client()
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next="), path
    for path, body in POSTS:
        assert client.post(path, body).status_code == 302, path
    assert _unchanged(tree)


def test_every_form_needs_its_csrf_token(staff, tree):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    for path, body in POSTS:
        assert client.post(path, body).status_code == 403, path
    assert _unchanged(tree)


def test_staff_find_the_page_in_the_navigation(staff_client, tree):
    assert 'href="/staff/accounts/"' in staff_client.get("/staff/").content.decode()
