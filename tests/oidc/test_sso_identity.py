"""Which portal user an SSO sign-in signs in as, through the whole redirect round trip against the
real provider and a live portal: the provider's issuer and subject, never a username. A provider
account named like a local one (`root`, `alice`, `Root`) gets an account of its own; staff are
never signed in by SSO, even linked; an existing account is reached only through a superuser's
audited link; and odd names are made to fit Django's rules."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command

from fairness.actions.audit import Actor
from fairness.actions.keys import issue
from fairness.actions.users import create_user
from fairness.models import AuditEntry, Membership, SsoIdentity
from fairness.portal.signin import group_sync, sso_identities
from tests.support.audit import SETUP
from tests.support.oidc import STAFF_IP, Labs, Provider, pages_as, signed_in_as, sso_sign_in

User = get_user_model()
OIDC = group_sync.sync_actor("oidc")


def test_a_provider_account_named_root_never_becomes_the_local_superuser(sso_portal, oidc_provider: Provider,
                                                                         labs: Labs):
    root = User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    oidc_provider.set({"root": ["nlp-lab"]})

    with sso_sign_in(sso_portal.url, "root") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "root-2"
        assert client.get(sso_portal.url + "/admin/").status_code == 302  # to the sign-in page, not in
        assert client.get(sso_portal.url + "/staff/").status_code in (302, 403)
    root.refresh_from_db()
    assert (root.email, root.is_superuser, root.check_password("the root password")) == (
        "root@portal.invalid", True, True)
    assert not SsoIdentity.objects.filter(user=root).exists()
    made = User.objects.get(username="root-2")
    assert not (made.is_staff or made.is_superuser) and made.email == "root@uni.example"
    identity = SsoIdentity.objects.get(user=made)
    assert (identity.issuer, identity.subject, identity.made_user) == (oidc_provider.issuer, "root", True)
    created = AuditEntry.objects.get(action="user.create", target="root-2")
    assert created.actor_name == "oidc" and created.detail["claimed_username"] == "root"
    assert created.detail["subject"] == "root"


def test_a_provider_alice_beside_a_local_researcher_alice_gets_an_account_of_her_own(
        sso_portal, oidc_provider: Provider, labs: Labs):
    alice = User.objects.create_user("alice", "alice@lab.invalid", "alice's own password")
    issue(SETUP, alice, labs.standard)
    hers = list(Membership.objects.filter(user=alice).values_list("account__name", "is_default"))
    oidc_provider.set({"alice": ["vision-lab"]})

    with sso_sign_in(sso_portal.url, "alice") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "alice-2"
    alice.refresh_from_db()
    assert alice.email == "alice@lab.invalid" and alice.check_password("alice's own password")
    # The provider's groups are not hers.
    assert list(Membership.objects.filter(user=alice).values_list("account__name", "is_default")) == hers
    assert not SsoIdentity.objects.filter(user=alice).exists()
    other = User.objects.get(username="alice-2")
    assert [m.account.name for m in Membership.objects.filter(user=other)] == ["vision"]
    assert other.api_keys.count() == 0 and alice.api_keys.count() == 1


def test_the_same_subject_is_the_same_user_after_a_rename_and_a_new_subject_never_is(
        sso_portal, oidc_provider: Provider, labs: Labs):
    oidc_provider.set({"u-1001": ["nlp-lab"]}, usernames={"u-1001": "eve"})
    with sso_sign_in(sso_portal.url, "u-1001") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "eve"

    # The provider renames her, and gives the freed name to someone new.
    oidc_provider.set({"u-1001": ["nlp-lab"], "u-2002": ["nlp-lab"]},
                      usernames={"u-1001": "eve.smith", "u-2002": "eve"})
    with sso_sign_in(sso_portal.url, "u-1001") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "eve"
    with sso_sign_in(sso_portal.url, "u-2002") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "eve-2"
    assert dict(SsoIdentity.objects.values_list("subject", "user__username")) == {"u-1001": "eve", "u-2002": "eve-2"}


@pytest.mark.parametrize(("claimed", "made"), [
    ("lab/alice", "lab-alice"),
    ("x" * 160, "x" * 150),
    ("Root", "root-2"),  # beside the local root: the case does not make it another name
    ("../../Etc", "etc"),
    ("Ünïcode Name", "ünïcode-name"),
])
def test_a_username_claim_is_made_to_fit_djangos_rules_and_the_users_page_still_answers(
        sso_portal, oidc_provider: Provider, labs: Labs, staff, claimed: str, made: str):
    User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    oidc_provider.set({"u-3003": ["nlp-lab"]}, usernames={"u-3003": claimed})

    with sso_sign_in(sso_portal.url, "u-3003") as (client, answer):
        assert answer.status_code == 200, answer.text[:500]
        assert signed_in_as(client, sso_portal.url) == made
    assert User.objects.filter(username__iexact="root").count() == 1
    page = pages_as(staff).get("/staff/users/")
    assert page.status_code == 200 and made in page.content.decode()


def test_staff_are_never_signed_in_by_sso_even_when_their_account_is_the_providers(
        sso_portal, oidc_provider: Provider, labs: Labs):
    oidc_provider.set({"u-4004": ["nlp-lab"]}, usernames={"u-4004": "tess"})
    with sso_sign_in(sso_portal.url, "u-4004") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "tess"
    tess = User.objects.get(username="tess")
    tess.is_staff = True  # a superuser makes her staff afterwards
    tess.save(update_fields=["is_staff"])

    with sso_sign_in(sso_portal.url, "u-4004") as (client, answer):
        assert answer.status_code == 403 and "staff sign in with their password" in answer.text
        assert signed_in_as(client, sso_portal.url) is None
        assert client.get(sso_portal.url + "/staff/").status_code == 302
    refused = AuditEntry.objects.get(action="user.sso.refused")
    assert (refused.target, refused.actor_name, refused.detail["reason"]) == ("tess", "oidc", "staff")
    assert User.objects.get(pk=tess.pk).is_active  # refused, not deactivated


def test_an_sso_session_ends_when_its_user_is_made_staff(sso_portal, oidc_provider: Provider, labs: Labs):
    oidc_provider.set({"u-4005": ["nlp-lab"]}, usernames={"u-4005": "tom"})
    with sso_sign_in(sso_portal.url, "u-4005") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "tom"
        User.objects.filter(username="tom").update(is_staff=True)  # a superuser promotes him meanwhile

        assert client.get(sso_portal.url + "/staff/").status_code == 302  # to the sign-in page
        assert signed_in_as(client, sso_portal.url) is None


def test_a_superuser_links_an_existing_researcher_on_purpose_and_her_email_stays_hers(
        sso_portal, oidc_provider: Provider, labs: Labs):
    bob = User.objects.create_user("bob", "bob@lab.invalid")
    oidc_provider.set({"u-5005": ["nlp-lab"]}, usernames={"u-5005": "robert"})

    call_command("link_sso_identity", "bob", "u-5005", "--issuer", oidc_provider.issuer)
    with sso_sign_in(sso_portal.url, "u-5005") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "bob"
    bob.refresh_from_db()
    assert bob.email == "bob@lab.invalid"  # the provider did not make the account: not its to change
    link = AuditEntry.objects.get(action="user.sso_link")
    assert (link.target, link.actor_name.startswith("os:"), link.detail["subject"], link.detail["how"]) == (
        "bob", True, "u-5005", "linked")
    assert not User.objects.filter(username="robert").exists()


def test_only_a_superuser_links_and_never_a_staff_account_or_a_taken_identity(staff):
    root = User.objects.create_superuser("root", "root@portal.invalid", "the root password")
    bob = User.objects.create_user("bob")
    issuer = "http://127.0.0.1:9/provider"
    with pytest.raises(PermissionDenied, match="Only a superuser"):
        sso_identities.link(Actor(staff, STAFF_IP), bob, issuer, "u-6006")
    with pytest.raises(CommandError, match="is staff"):
        call_command("link_sso_identity", "root", "u-6006", "--issuer", issuer)
    sso_identities.link(Actor(root, STAFF_IP), bob, issuer, "u-6006")
    carol = User.objects.create_user("carol")
    with pytest.raises(PermissionDenied, match="signs in as bob already"):
        sso_identities.link(Actor(root, STAFF_IP), carol, issuer, "u-6006")

    assert list(SsoIdentity.objects.values_list("user__username", flat=True)) == ["bob"]
    refused = list(AuditEntry.objects.filter(action="user.sso_link.refused").order_by("pk")
                   .values_list("actor_name", "target"))
    assert [(name if not name.startswith("os:") else "os", target) for name, target in refused] == [
        ("sam", "bob"), ("os", "root"), ("root", "carol")]


def test_an_account_sso_made_before_identities_were_kept_is_taken_over_once_by_its_name(
        sso_portal, oidc_provider: Provider, labs: Labs):
    olga = create_user(OIDC, "olga", "olga@uni.example")  # as the username-matching sign-in made her
    oidc_provider.set({"u-7007": ["nlp-lab"], "u-8008": ["nlp-lab"]}, usernames={"u-7007": "olga", "u-8008": "olga"})

    with sso_sign_in(sso_portal.url, "u-7007") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "olga"
    with sso_sign_in(sso_portal.url, "u-8008") as (client, _):
        assert signed_in_as(client, sso_portal.url) == "olga-2"
    assert SsoIdentity.objects.get(subject="u-7007").user == olga
    assert AuditEntry.objects.get(action="user.sso_link").detail["how"] == "made by SSO before identities"
