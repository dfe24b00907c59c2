"""Admin tokens through the staff pages: shown once, issued once, for oneself unless superuser."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.test import Client

from fairness.actions.audit import Actor
from fairness.actions.tokens import issue_admin_token
from fairness.gateway.api_keys import hash_secret
from fairness.models import AdminToken, AuditEntry
from tests.support.cast import STAFF_IP
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gpa-[^<]+)</code>')


def admin_get(secret: str):
    return Client().get("/api/admin/keys", HTTP_AUTHORIZATION=f"Bearer {secret}")


def issue(client, **fields) -> tuple[str, object]:
    response = client.post("/staff/tokens/issue/", key_form(**fields))
    assert response.status_code == 200, response.content
    return SECRET.search(response.content.decode()).group(1), response


@pytest.fixture
def tess(tiers):
    """Another staff member, not a superuser."""
    return get_user_model().objects.create_user("tess", password="another long password", is_staff=True)


@pytest.fixture
def root_client(tiers):
    client = Client(REMOTE_ADDR=STAFF_IP)
    client.force_login(get_user_model().objects.create_superuser("root", password="the longest password"))
    return client


def test_the_secret_is_shown_once_and_opens_the_admin_api(staff, staff_client, cast):
    secret, response = issue(staff_client, owner="sam", label="nightly sync", expires_days=7)

    html = response.content.decode()
    assert "cannot be shown again" in html and 'data-copy="secret"' in html
    assert "no-store" in response["Cache-Control"]
    token = AdminToken.objects.get(secret_hash=hash_secret(secret))
    assert (token.owner, token.label, token.prefix) == (staff, "nightly sync", secret[:12])
    assert 6 <= (token.expires_at - token.created_at).days <= 7
    assert admin_get(secret).status_code == 200

    listing = staff_client.get("/staff/tokens/").content.decode()
    assert f"{token.prefix}…" in listing and "nightly sync" in listing and secret not in listing
    for path in ("/staff/tokens/issue/", "/staff/audit/", "/staff/keys/"):
        assert secret not in staff_client.get(path).content.decode()


def test_sending_the_issue_form_again_issues_nothing_new(staff_client, cast):
    fields = key_form(owner="sam", label="sync")
    first = staff_client.post("/staff/tokens/issue/", fields)
    secret = SECRET.search(first.content.decode()).group(1)

    again = staff_client.post("/staff/tokens/issue/", fields, follow=True)

    html = again.content.decode()
    assert again.redirect_chain == [("/staff/tokens/", 302)]
    assert f"already sent and made admin token {secret[:12]}…" in html and secret not in html
    assert AdminToken.objects.count() == 1
    assert AuditEntry.objects.filter(action="admin_token.issue").count() == 1


def test_staff_issue_tokens_for_themselves_only(staff, staff_client, cast, tess):
    form = staff_client.get("/staff/tokens/issue/").content.decode()
    assert '<option value="sam" selected>' in form and 'value="tess"' not in form
    assert '<option value="">' not in form  # the only choice: no empty one above it

    response = staff_client.post("/staff/tokens/issue/", key_form(owner="tess", label="borrowed"))

    assert response.status_code == 200 and "owner" in response.context["form"].errors
    assert not AdminToken.objects.exists()
    with pytest.raises(PermissionDenied):  # the action holds the rule too, for every other caller
        issue_admin_token(Actor(staff), tess, "borrowed")
    assert not AdminToken.objects.exists() and not AuditEntry.objects.exists()


def test_a_superuser_issues_for_other_staff_but_never_for_a_researcher(staff, root_client, cast):
    form = root_client.get("/staff/tokens/issue/").content.decode()
    assert '<option value="root" selected>' in form and '<option value="sam">' in form  # oneself, first
    secret, _ = issue(root_client, owner="sam", label="for sam")
    assert AdminToken.objects.get(secret_hash=hash_secret(secret)).owner == staff
    assert AuditEntry.objects.get(action="admin_token.issue").actor_name == "root"

    response = root_client.post("/staff/tokens/issue/", key_form(owner="alice"))

    assert "owner" in response.context["form"].errors
    assert AdminToken.objects.count() == 1


def test_researchers_and_visitors_get_no_access(staff, researcher_client, cast):
    token, _ = issue_admin_token(Actor(staff), staff, "ci")
    pages = ["/staff/tokens/", "/staff/tokens/issue/", f"/staff/tokens/{token.prefix}/revoke/"]
    for path in pages:
        assert researcher_client.get(path).status_code == 403, path
        anonymous = Client().get(path)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")

    assert researcher_client.post("/staff/tokens/issue/", key_form(owner="alice")).status_code == 403
    assert researcher_client.post(f"/staff/tokens/{token.prefix}/revoke/").status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None and AdminToken.objects.count() == 1
    assert b"/staff/tokens/" not in researcher_client.get("/me/").content


def test_the_staff_navigation_links_to_the_tokens(staff_client, cast):
    html = staff_client.get("/staff/tokens/").content.decode()
    assert '<a href="/staff/tokens/" aria-current="page">Admin tokens</a>' in html


def test_revoking_asks_first_then_the_token_stops(staff, staff_client, cast):
    token, secret = issue_admin_token(Actor(staff), staff, "ci")
    confirm = staff_client.get(f"/staff/tokens/{token.prefix}/revoke/")
    assert b"cannot be undone" in confirm.content
    token.refresh_from_db()
    assert token.revoked_at is None and admin_get(secret).status_code == 200

    response = staff_client.post(f"/staff/tokens/{token.prefix}/revoke/", follow=True)

    assert f"Revoked admin token {token.prefix}…" in response.content.decode()
    assert admin_get(secret).status_code == 401
    again = staff_client.post(f"/staff/tokens/{token.prefix}/revoke/", follow=True)
    assert "was already revoked" in again.content.decode()
    assert AuditEntry.objects.filter(action="admin_token.revoke").count() == 1
    assert staff_client.get("/staff/tokens/gpa-nothing/revoke/").status_code == 404


def test_each_token_action_is_audited_with_actor_and_address(staff, staff_client, cast):
    secret, _ = issue(staff_client, owner="sam", label="sync", expires_days=3)
    prefix = secret[:12]
    staff_client.post(f"/staff/tokens/{prefix}/revoke/")

    revoked, issued = AuditEntry.objects.all()  # newest first
    assert (issued.action, revoked.action) == ("admin_token.issue", "admin_token.revoke")
    for entry in (issued, revoked):
        assert (entry.actor, entry.actor_name, entry.ip, entry.target) == (staff, "sam", STAFF_IP, prefix)
    assert issued.detail["owner"] == "sam" and issued.detail["label"] == "sync" and issued.detail["expires_at"]
    assert secret not in str(issued.detail)
