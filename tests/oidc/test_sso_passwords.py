"""Nobody gives a local password to someone who signs in with the institution's account: with one,
whoever set it could sign in as them, and leaving every mapped group would no longer shut them
out. Their first sign-in runs through the real provider and a live portal."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.test import Client

from fairness.actions.audit import Actor
from fairness.actions.users import set_password
from fairness.models import AuditEntry
from tests.support.oidc import STAFF_IP, Labs, Provider, pages_as, signed_in_as, sso_sign_in

User = get_user_model()
NEW = {"new_password1": "a taken-over account", "new_password2": "a taken-over account"}


@pytest.fixture
def eve(sso_portal, oidc_provider: Provider, labs: Labs):
    """A researcher her first SSO sign-in made."""
    oidc_provider.set({"eve": ["nlp-lab"]})
    with sso_sign_in(sso_portal.url, "eve") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "eve"
    return User.objects.get(username="eve")


def test_staff_cannot_give_an_sso_user_a_password_on_the_users_pages(eve, staff):
    staff_client = pages_as(staff)
    assert "/staff/users/eve/password/" not in staff_client.get("/staff/users/").content.decode()

    page = staff_client.get("/staff/users/eve/password/")
    response = staff_client.post("/staff/users/eve/password/", NEW)

    why = "eve signs in with the institution&#x27;s sign-in service (SSO)"
    assert page.status_code == 403 and why in page.content.decode()
    assert response.status_code == 403 and why in response.content.decode()
    eve.refresh_from_db()
    assert not eve.has_usable_password()
    assert not Client().login(username="eve", password=NEW["new_password1"])
    refused = AuditEntry.objects.get(action="user.password.refused")
    assert (refused.target, refused.actor, refused.ip) == ("eve", staff, STAFF_IP)
    assert not AuditEntry.objects.filter(action="user.password").exists()


def test_not_even_a_superuser_gives_an_sso_user_a_password(eve):
    root = User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    assert pages_as(root).post("/staff/users/eve/password/", NEW).status_code == 403
    with pytest.raises(PermissionDenied, match="signs in with"):
        set_password(Actor(None, name="os:root"), eve, NEW["new_password1"])

    assert not Client().login(username="eve", password=NEW["new_password1"])
    assert list(AuditEntry.objects.filter(action="user.password.refused").values_list("actor_name", flat=True)
                .order_by("pk")) == ["root", "os:root"]


def test_the_django_admin_gives_an_sso_user_no_password_either(eve):
    root = User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    admin = pages_as(root)
    page = f"/admin/auth/user/{eve.pk}/password/"

    assert admin.get(page).status_code == 403
    response = admin.post(page, {"password1": NEW["new_password1"], "password2": NEW["new_password2"],
                                 "usable_password": "true"})

    assert response.status_code == 403
    assert not Client().login(username="eve", password=NEW["new_password1"])
    refused = AuditEntry.objects.get(action="user.password.refused")
    assert (refused.target, refused.actor, refused.ip) == ("eve", root, STAFF_IP)
