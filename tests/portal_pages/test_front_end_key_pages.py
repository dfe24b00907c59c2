"""Front-end keys on the staff pages: issued with a sealed JWT secret that no page shows back,
changed beside revoke, audited, marked on the list; researchers can do none of it."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from fairness.gateway.api_keys import hash_secret
from fairness.gateway.front_end_secrets import unseal
from fairness.models import ApiKey, AuditEntry
from fairness.portal.submit_once import new_token
from fairness.store.keyspace import CONFIG_EPOCH
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')
JWT_SECRET = "open-webui-forwarding-secret-0123456789abcdef"
NEW_SECRET = "a-second-forwarding-secret-fedcba9876543210"


def front_end_form(**fields) -> dict:
    return {"front_end_kind": "openwebui", "jwt_secret": JWT_SECRET, "adds_people": "on", **fields}


def issue(client, **fields) -> ApiKey:
    response = client.post("/staff/keys/issue/", key_form(owner="alice", tier="interactive", **fields))
    assert response.status_code == 200, response.content
    found = SECRET.search(response.content.decode())
    assert found, response.context["form"].errors
    return ApiKey.objects.get(secret_hash=hash_secret(found.group(1)))


def everything_shown(client, key: ApiKey) -> str:
    paths = ("/staff/keys/", "/staff/audit/", f"/staff/keys/{key.prefix}/front-end/", "/staff/keys/issue/")
    return "".join(client.get(path).content.decode() for path in paths)


def test_the_issue_form_offers_a_front_end_with_a_secret_field_that_is_a_password(staff_client, cast):
    html = staff_client.get("/staff/keys/issue/").content.decode()

    assert '<option value="openwebui">Open WebUI</option>' in html
    assert re.search(r'<input type="password" name="jwt_secret"[^>]*autocomplete="new-password"', html)
    assert "FORWARD_USER_INFO_HEADER_JWT_SECRET" in html
    assert 'name="trusts_plain_headers"' in html and 'name="adds_people"' in html


def test_staff_issue_a_front_end_key_whose_secret_is_sealed_and_shown_nowhere(staff_client, cast):
    key = issue(staff_client, label="open webui", **front_end_form())

    assert key.front_end == "openwebui" and unseal(key.front_end_secret) == JWT_SECRET
    assert (key.front_end_trusts_plain_headers, key.front_end_adds_people) == (False, True)
    entry = AuditEntry.objects.get(action="key.issue", target=key.prefix)
    assert (entry.actor_name, entry.detail["front_end"], entry.detail["jwt_secret_set"]) == ("sam", "openwebui", True)
    assert JWT_SECRET not in json.dumps(entry.detail)
    shown = everything_shown(staff_client, key)
    assert JWT_SECRET not in shown and key.front_end_secret not in shown


def test_a_refused_form_does_not_render_the_secret_back(staff_client, cast):
    response = staff_client.post("/staff/keys/issue/", key_form(owner="nobody", tier="interactive",
                                                                 **front_end_form()))

    assert response.status_code == 200 and "owner" in response.context["form"].errors
    assert JWT_SECRET not in response.content.decode()
    assert ApiKey.objects.count() == 3


@pytest.mark.parametrize(("fields", "field", "message"), [
    (front_end_form(jwt_secret="too short"), "jwt_secret", "at least 32 bytes"),
    (front_end_form(jwt_secret=""), "jwt_secret", "give it, or trust plain headers"),
    ({"jwt_secret": JWT_SECRET}, "front_end_kind", "choose the front end too"),
    (front_end_form(front_end_kind="librechat"), "front_end_kind", "not one of the available choices"),
])
def test_a_front_end_asked_for_wrongly_is_shown_on_the_form(staff_client, cast, fields, field, message):
    response = staff_client.post("/staff/keys/issue/", key_form(owner="alice", tier="interactive", **fields))

    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert ApiKey.objects.count() == 3 and not AuditEntry.objects.exists()


def test_plain_headers_need_no_secret(staff_client, cast):
    key = issue(staff_client, **front_end_form(jwt_secret="", trusts_plain_headers="on", adds_people=""))

    assert (key.front_end, key.front_end_secret, key.front_end_trusts_plain_headers) == ("openwebui", "", True)
    assert key.front_end_adds_people is False


def test_the_list_marks_front_end_keys_and_links_their_settings(staff_client, cast):
    key = issue(staff_client, **front_end_form())
    plain = ApiKey.objects.get(pk=cast["bob"].key_id)

    html = staff_client.get("/staff/keys/").content.decode()

    assert html.count("front end: Open WebUI") == 1
    row = re.search(rf'<tr[^>]*data-prefix="{re.escape(key.prefix)}">.*?</tr>', html, re.S).group(0)
    assert "front end: Open WebUI" in row and f"/staff/keys/{key.prefix}/front-end/" in row
    assert f"/staff/keys/{plain.prefix}/front-end/" in html


def test_staff_change_the_secret_and_modes_audited_and_gateways_are_told(staff_client, cast, redis_client):
    key = issue(staff_client, **front_end_form())
    page = staff_client.get(f"/staff/keys/{key.prefix}/front-end/").content.decode()
    assert "A secret is set (never shown)" in page and JWT_SECRET not in page
    redis_client.set(CONFIG_EPOCH, "before")

    response = staff_client.post(f"/staff/keys/{key.prefix}/front-end/",
                                 front_end_form(jwt_secret=NEW_SECRET, trusts_plain_headers="on"), follow=True)

    assert response.redirect_chain == [("/staff/keys/", 302)]
    assert "speaks for Open WebUI" in response.content.decode()
    key.refresh_from_db()
    assert unseal(key.front_end_secret) == NEW_SECRET and key.front_end_trusts_plain_headers
    assert redis_client.get(CONFIG_EPOCH) != b"before"
    entry = AuditEntry.objects.get(action="key.front_end", target=key.prefix)
    assert (entry.actor_name, entry.detail["secret_replaced"], entry.detail["trusts_plain_headers"]) == (
        "sam", True, True)
    assert NEW_SECRET not in everything_shown(staff_client, key) + json.dumps(entry.detail)


def test_an_empty_secret_keeps_the_one_set(staff_client, cast):
    key = issue(staff_client, **front_end_form())

    staff_client.post(f"/staff/keys/{key.prefix}/front-end/", front_end_form(jwt_secret="", adds_people=""))

    key.refresh_from_db()
    assert unseal(key.front_end_secret) == JWT_SECRET and key.front_end_adds_people is False
    assert AuditEntry.objects.get(action="key.front_end").detail["secret_replaced"] is False


def test_choosing_no_front_end_turns_it_off_and_forgets_the_secret(staff_client, cast):
    key = issue(staff_client, **front_end_form())

    staff_client.post(f"/staff/keys/{key.prefix}/front-end/", {"front_end_kind": "", "adds_people": "on"})

    key.refresh_from_db()
    assert (key.front_end, key.front_end_secret) == ("", "")
    assert "front end: Open WebUI" not in staff_client.get("/staff/keys/").content.decode()


def test_a_revoked_key_cannot_be_changed(staff_client, cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)
    staff_client.post(f"/staff/keys/{key.prefix}/revoke/")

    response = staff_client.post(f"/staff/keys/{key.prefix}/front-end/", front_end_form(), follow=True)

    assert "is revoked" in response.content.decode()
    key.refresh_from_db()
    assert key.front_end == "" and not AuditEntry.objects.filter(action="key.front_end").exists()


def test_a_researcher_cannot_reach_the_staff_doors(researcher_client, cast):
    own = ApiKey.objects.get(pk=cast["alice"].key_id)

    issuing = researcher_client.post("/staff/keys/issue/", key_form(owner="alice", tier="interactive",
                                                                    **front_end_form()))
    changing = researcher_client.post(f"/staff/keys/{own.prefix}/front-end/", front_end_form())
    looking = researcher_client.get(f"/staff/keys/{own.prefix}/front-end/")

    assert (issuing.status_code, changing.status_code, looking.status_code) == (403, 403, 403)
    own.refresh_from_db()
    assert own.front_end == "" and ApiKey.objects.count() == 3


def test_an_anonymous_visitor_is_sent_to_sign_in(cast):
    own = ApiKey.objects.get(pk=cast["alice"].key_id)
    response = Client().post(f"/staff/keys/{own.prefix}/front-end/", front_end_form())
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_researchers_own_key_cannot_be_made_a_front_end(researcher_client, cast):
    # The self-service form has no such fields: whatever is sent for them is ignored.
    response = researcher_client.post("/me/keys/", {
        "label": "my webui", "expires_days": 30, "once": new_token(), **front_end_form(),
        "front_end": "openwebui", "front_end_jwt_secret": JWT_SECRET, "trusts_plain_headers": "on",
    })

    assert response.status_code == 200
    made = ApiKey.objects.get(label="my webui")
    assert (made.front_end, made.front_end_secret, made.front_end_trusts_plain_headers) == ("", "", False)


@pytest.mark.parametrize("path", ["/staff/keys/issue/", "/staff/keys/{prefix}/front-end/"])
def test_an_error_report_of_either_form_hides_the_secret(staff_client, cast, path):
    from django.views.debug import SafeExceptionReporterFilter

    prefix = ApiKey.objects.get(pk=cast["bob"].key_id).prefix
    response = staff_client.post(path.format(prefix=prefix), key_form(owner="bob", tier="interactive",
                                                                       **front_end_form()))

    reported = SafeExceptionReporterFilter().get_post_parameters(response.wsgi_request)
    assert reported["jwt_secret"] != JWT_SECRET and reported["owner"] == "bob"
