"""What a misconfigured or unreachable provider does to sign-in (in-process, against the real
provider for discovery), the sign-in page's SSO button, and GP_LOCAL_SIGNIN."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from tests.support.oidc import Provider, sso_settings
from tests.support.processes import free_port

User = get_user_model()


@pytest.fixture(autouse=True)
def _redis(redis_url: str) -> None:
    """The sign-in counters live in Redis: each test starts from none."""


def test_the_sign_in_page_shows_the_sso_button_only_when_an_issuer_is_set(db, oidc_provider: Provider):
    assert "institution" not in Client().get("/accounts/login/").content.decode()
    with override_settings(**sso_settings(oidc_provider.issuer)):
        page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with your institution's account" in page
    assert Client().get("/oidc/authenticate/").status_code == 404


def test_the_password_form_s_heading_says_whose_passwords_it_takes(db, oidc_provider: Provider):
    def heading() -> str:
        page = Client().get("/accounts/login/").content.decode()
        return page.split('id="password-heading">')[1].split("</h2>")[0]

    with override_settings(**sso_settings(oidc_provider.issuer)):
        assert heading() == "With a password"
        with override_settings(GP_LOCAL_SIGNIN="staff"):
            assert heading() == "Staff: with a password"
            # Directory users sign in on this form too, whatever GP_LOCAL_SIGNIN says.
            with override_settings(GP_LDAP_SERVER_URI="ldap://127.0.0.1:1"):
                assert heading() == "With your directory password"


def test_a_discovery_document_naming_another_issuer_is_refused(db, oidc_provider: Provider):
    # The same provider reached by another name: its document names 127.0.0.1, not localhost.
    wrong = oidc_provider.issuer.replace("127.0.0.1", "localhost")
    with override_settings(**sso_settings(wrong)):
        response = Client().get("/oidc/authenticate/")
    assert response.status_code == 503
    text = response.content.decode()
    assert "misconfigured" in text and f"says its issuer is &#x27;{oidc_provider.issuer}&#x27;" in text


def test_discovery_sends_the_browser_to_the_providers_authorization_endpoint(db, oidc_provider: Provider):
    with override_settings(**sso_settings(oidc_provider.issuer)):
        response = Client().get("/oidc/authenticate/?next=/me/usage/")
    assert response.status_code == 302
    assert response["Location"].startswith(oidc_provider.issuer + "/auth?")
    assert "code_challenge=" in response["Location"]


def test_an_unreachable_provider_gets_a_clear_page_and_staff_still_sign_in_with_a_password(staff):
    staff.set_password("staff-password-123")
    staff.save()
    with override_settings(**sso_settings(f"http://127.0.0.1:{free_port()}")):
        client = Client()
        response = client.get("/oidc/authenticate/")
        assert response.status_code == 503
        assert "cannot be reached" in response.content.decode()
        assert "Back to sign-in" in response.content.decode()
        signed_in = client.post("/accounts/login/", {"username": staff.username, "password": "staff-password-123"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/staff/"


@override_settings(GP_LOCAL_SIGNIN="staff")
def test_with_local_sign_in_for_staff_only_a_researcher_password_is_refused(staff, cast):
    alice = User.objects.get(username="alice")
    alice.set_password("alice-password-123")
    alice.save()
    staff.set_password("staff-password-123")
    staff.save()
    refused = Client().post("/accounts/login/", {"username": "alice", "password": "alice-password-123"})
    assert refused.status_code == 200
    assert "passwords are for staff only here" in refused.content.decode()
    allowed = Client().post("/accounts/login/", {"username": staff.username, "password": "staff-password-123"})
    assert allowed.status_code == 302
