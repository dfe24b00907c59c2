"""Who may set whose password: staff give a researcher a first one, a superuser anything more.

Setting a password is signing in as that person, so a staff member who could set a superuser's
(or another staff member's, or a researcher's existing one) could take over their account.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.test import Client

from fairness.actions.audit import Actor
from fairness.actions.users import create_user, set_password
from fairness.models import AuditEntry
from fairness.portal.signin import group_sync
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()

NEW = {"new_password1": "a taken-over account", "new_password2": "a taken-over account"}


def _people():
    return {
        "root": User.objects.create_superuser("root", password="the root password"),
        "tess": User.objects.create_user("tess", password="tess's own password", is_staff=True),
        "ruth": User.objects.create_user("ruth", password="ruth's own password"),
        "nora": User.objects.create_user("nora"),  # created without one: the set-password step
    }


@pytest.mark.parametrize(("target", "why"), [
    ("root", "superuser may set the password of root, who is staff"),
    ("tess", "superuser may set the password of tess, who is staff"),
    ("ruth", "ruth has a password already"),
])
def test_staff_cannot_set_the_password_of_staff_or_of_anyone_who_has_one(staff, staff_client, target, why):
    people = _people()
    before = people[target].password

    page = staff_client.get(f"/staff/users/{target}/password/")
    assert page.status_code == 403 and why in page.content.decode()
    response = staff_client.post(f"/staff/users/{target}/password/", NEW)

    assert response.status_code == 403 and why in response.content.decode()
    people[target].refresh_from_db()
    assert people[target].password == before
    assert not Client().login(username=target, password=NEW["new_password1"])
    entry = AuditEntry.objects.get()  # the attempt, not the page view
    assert (entry.action, entry.target, entry.actor, entry.ip) == ("user.password.refused", target, staff, STAFF_IP)
    assert why in entry.detail["reason"]


def test_the_action_itself_refuses_and_audits_whoever_calls_it(staff):
    root = _people()["root"]
    with pytest.raises(PermissionDenied):
        set_password(Actor(staff, "127.10.0.9"), root, NEW["new_password1"])
    root.refresh_from_db()
    assert root.check_password("the root password")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.ip) == ("user.password.refused", "root", "127.10.0.9")


def test_staff_set_a_first_password_for_a_researcher_created_without_one(staff, staff_client):
    _people()
    response = staff_client.post("/staff/users/nora/password/", NEW)
    assert response.status_code == 302
    assert Client().login(username="nora", password=NEW["new_password1"])
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.actor) == ("user.password", "nora", staff)
    assert "a taken-over" not in str(entry.detail)

    # Once set, it is nora's: a second one is not staff's to give.
    again = staff_client.post("/staff/users/nora/password/", {"new_password1": "x another one x",
                                                               "new_password2": "x another one x"})
    assert again.status_code == 403
    assert Client().login(username="nora", password=NEW["new_password1"])


def test_a_superuser_may_set_the_password_of_staff(staff):
    people = _people()
    client = Client(REMOTE_ADDR="127.10.0.8")
    client.force_login(people["root"])
    response = client.post("/staff/users/tess/password/", NEW)
    assert response.status_code == 302
    assert Client().login(username="tess", password=NEW["new_password1"])
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.actor_name, entry.ip) == ("user.password", "tess", "root", "127.10.0.8")


def test_staff_creating_staff_are_not_sent_to_a_password_page_they_cannot_use(staff_client):
    response = staff_client.post("/staff/users/new/", {"username": "ivy", "is_staff": "on"}, follow=True)
    assert response.redirect_chain[-1][0] == "/staff/users/"
    assert "A superuser must set their password." in response.content.decode()


def test_the_users_page_offers_set_password_only_where_it_would_be_allowed(staff, staff_client):
    _people()
    page = staff_client.get("/staff/users/").content.decode()
    offered = {name for name in ("root", "tess", "ruth", "nora") if f"/staff/users/{name}/password/" in page}
    assert offered == {"nora"}


def test_staff_cannot_give_a_directory_user_a_password(staff):
    # Made as the directory sign-in makes its accounts (tests/ldap signs one in through slapd).
    create_user(group_sync.sync_actor("ldap", "127.0.0.5"), "bob", "bob@uni.example")
    staff_client = Client(REMOTE_ADDR="127.0.0.7")
    staff_client.force_login(staff)

    assert "/staff/users/bob/password/" not in staff_client.get("/staff/users/").content.decode()
    response = staff_client.post("/staff/users/bob/password/", NEW)

    assert response.status_code == 403 and "bob signs in with the institution&#x27;s directory" in \
        response.content.decode()
    assert not Client().login(username="bob", password=NEW["new_password1"])
    refused = AuditEntry.objects.get(action="user.password.refused")
    assert (refused.target, refused.actor) == ("bob", staff)
    assert "directory" in refused.detail["reason"]


def test_the_django_admin_sets_a_researchers_first_password_audited(tiers):
    root = User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    nora = User.objects.create_user("nora")
    admin = Client(REMOTE_ADDR="127.0.0.8")
    admin.force_login(root)

    response = admin.post(f"/admin/auth/user/{nora.pk}/password/", {
        "password1": NEW["new_password1"], "password2": NEW["new_password2"], "usable_password": "true"})

    assert response.status_code == 302
    assert Client().login(username="nora", password=NEW["new_password1"])
    entry = AuditEntry.objects.get(action="user.password")
    assert (entry.target, entry.actor, entry.ip, entry.detail) == ("nora", root, "127.0.0.8", {"via": "admin"})
