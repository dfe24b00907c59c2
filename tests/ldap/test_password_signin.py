"""Directory accounts sign in on the password page, against a real slapd: the account made at the
first sign-in, memberships and tier from the group mappings, and what is refused (a wrong
password, LDAP filter injection, a local account's name, a directory that cannot be reached)."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from fairness.actions.keys import issue
from fairness.models import AuditEntry, Membership
from fairness.portal.signin import group_sync
from tests.support.audit import SETUP
from tests.support.ldap import PASSWORDS, Labs, Slapd, needs_slapd

pytestmark = needs_slapd
User = get_user_model()


def sign_in(username: str, password: str, address: str = "127.192.2.10"):
    """The password page's answer: a redirect when signed in, the form again when not."""
    client = Client(REMOTE_ADDR=address)
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return client, response


def form_error(response) -> str:
    assert response.status_code == 200, response.status_code
    return " ".join(response.context["form"].non_field_errors())


def memberships(username: str) -> dict[str, bool]:
    return {m.account.name: m.is_default
            for m in Membership.objects.filter(user__username=username).select_related("account")}


def test_a_directory_user_signs_in_and_joins_their_groups_accounts(slapd: Slapd, labs: Labs, redis_url):
    client, response = sign_in("bob", PASSWORDS["bob"])

    assert response.status_code == 302 and response["Location"] == "/me/"
    assert client.get("/me/").status_code == 200
    bob = User.objects.get(username="bob")
    assert bob.email == "bob@uni.example" and not bob.has_usable_password()
    # nlp-lab is mapped by its DN, vision-lab by its cn; the first by mapping name is the default.
    assert memberships("bob") == {"nlp": True, "vision": False}
    tiers = {m.account.name: group_sync.mapped_tier(m) for m in Membership.objects.filter(user=bob)}
    assert tiers == {"nlp": labs.standard, "vision": labs.batch}
    assert list(AuditEntry.objects.filter(actor_name="ldap").order_by("pk").values_list("action", "target")) == [
        ("user.create", "bob"), ("account.add_member", "nlp"), ("account.add_member", "vision")]


def test_a_second_sign_in_follows_the_groups_the_directory_has_now(slapd: Slapd, labs: Labs, redis_url):
    sign_in("bob", PASSWORDS["bob"])
    slapd.remove_member("vision-lab", "bob")

    _, response = sign_in("BOB", PASSWORDS["bob"])  # the directory's uid matches without regard to case

    assert response.status_code == 302
    assert User.objects.filter(username__iexact="bob").count() == 1
    assert memberships("bob") == {"nlp": True}


def test_posix_groups_match_by_member_uid(slapd: Slapd, labs: Labs, redis_url):
    with override_settings(GP_LDAP_GROUP_TYPE="posixGroup"):
        _, response = sign_in("dave", PASSWORDS["dave"])
    assert response.status_code == 302
    assert memberships("dave") == {"hpc": True}


def test_a_wrong_password_signs_nobody_in(slapd: Slapd, labs: Labs, redis_url):
    _, response = sign_in("alice", "not-alices-password")
    assert "correct username and password" in form_error(response)
    assert not User.objects.filter(username="alice").exists()


@pytest.mark.parametrize("username", ["*", ")(uid=*", "admin)(|(uid=*", "alice)(uid=*", "*)(objectClass=*"])
def test_ldap_filter_injection_in_the_username_signs_nobody_in(slapd: Slapd, labs: Labs, redis_url, username):
    for password in (PASSWORDS["alice"], PASSWORDS["admin"], "*"):
        _, response = sign_in(username, password)
        assert "correct username and password" in form_error(response)
    assert not User.objects.exists()


def test_a_local_staff_account_is_not_taken_over_by_the_directory_user_of_that_name(
        slapd: Slapd, labs: Labs, redis_url, staff):
    # sam is local staff (tests/conftest.py); the directory has another sam, in a mapped group.
    _, response = sign_in("sam", PASSWORDS["sam"])
    assert "correct username and password" in form_error(response)
    _, response = sign_in("SAM", PASSWORDS["sam"])
    assert "correct username and password" in form_error(response)

    _, response = sign_in("sam", "a long staff password")
    assert response.status_code == 302 and response["Location"] == "/staff/"
    assert memberships("sam") == {} and not AuditEntry.objects.filter(actor_name="ldap").exists()


def test_someone_in_no_mapped_group_is_refused_and_their_keys_stop(slapd: Slapd, labs: Labs, gateway):
    sign_in("alice", PASSWORDS["alice"])
    _, secret = issue(SETUP, User.objects.get(username="alice"), labs.standard)

    def gateway_says() -> str:
        response = httpx.post(gateway.url + "/v1/chat/completions", timeout=5,
                              headers={"Authorization": f"Bearer {secret}"},
                              json={"model": "sim", "messages": [{"role": "user", "content": "hi"}]})
        return response.json()["error"]["code"] if response.status_code == 401 else f"status {response.status_code}"

    assert gateway_says() != "owner_inactive"
    slapd.remove_member("nlp-lab", "alice")

    _, response = sign_in("alice", PASSWORDS["alice"])

    assert "none of the groups" in form_error(response)
    assert not User.objects.get(username="alice").is_active
    assert gateway_says() == "owner_inactive"  # the gateway checks the config epoch at every request
    assert AuditEntry.objects.filter(action="user.deactivate", target="alice", actor_name="ldap").exists()


def test_a_directory_that_cannot_be_reached_says_so_and_local_staff_still_sign_in(
        slapd: Slapd, labs: Labs, redis_url, staff, unreachable: str):
    with override_settings(GP_LDAP_SERVER_URI=unreachable):
        _, response = sign_in("alice", PASSWORDS["alice"])
        assert "directory cannot be reached" in form_error(response)
        _, response = sign_in("sam", "a long staff password")
        assert response.status_code == 302
    assert not User.objects.filter(username="alice").exists()


def test_local_signin_for_staff_only_still_lets_directory_users_in(slapd: Slapd, labs: Labs, redis_url):
    User.objects.create_user("erin", password="erins own long password")
    with override_settings(GP_LOCAL_SIGNIN="staff"):
        _, response = sign_in("alice", PASSWORDS["alice"])
        assert response.status_code == 302
        _, response = sign_in("erin", "erins own long password")
        assert "staff only" in form_error(response)


def test_staff_cannot_give_a_directory_user_a_password_to_sign_in_with(slapd: Slapd, labs: Labs, redis_url, staff):
    _, response = sign_in("bob", PASSWORDS["bob"], address="127.0.0.10")
    assert response.status_code == 302
    staff_client = Client(REMOTE_ADDR="127.0.0.7")
    staff_client.force_login(staff)
    chosen = "a password staff chose"

    refused = staff_client.post("/staff/users/bob/password/", {"new_password1": chosen, "new_password2": chosen})

    assert refused.status_code == 403 and "the institution&#x27;s directory" in refused.content.decode()
    _, response = sign_in("bob", chosen, address="127.0.0.10")
    assert "correct username and password" in form_error(response)
    entry = AuditEntry.objects.get(action="user.password.refused")
    assert (entry.target, entry.actor) == ("bob", staff)
