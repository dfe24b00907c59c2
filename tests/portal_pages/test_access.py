"""Every page's door: anonymous visitors sign in first, researchers are refused staff pages."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from fairness.models import ApiKey, Replica, SaturationAlert
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

STAFF_PAGES = [
    "/staff/",
    "/staff/keys/",
    "/staff/keys/?q=bob&tier=interactive&state=all&sort=-in_flight",
    "/staff/keys/load.json?prefix={prefix}",
    "/staff/keys/?show=all",
    "/staff/keys/issue/",
    "/staff/keys/{prefix}/revoke/",
    "/staff/keys/{prefix}/rotate/",
    "/staff/users/",
    "/staff/users/new/",
    "/staff/users/alice/password/",
    "/staff/tiers/",
    "/staff/tiers/new/",
    "/staff/tiers/batch/edit/",
    "/staff/replicas/",
    "/staff/replicas/new/",
    "/staff/replicas/gpu0/edit/",
    "/staff/replicas/gpu0/delete/",
    "/staff/replicas/gpu0/disable/",
    "/staff/alerts/",
    "/staff/audit/",
    "/staff/batches/",
    "/staff/requests/",
    "/staff/requests/?person=alice&ended=done&from=2031-03-10T00:00",
    "/staff/requests.csv",
]
STAFF_ACTIONS = [  # POST only
    ("/staff/users/alice/tier/", {"tier": "batch"}),
    ("/staff/replicas/gpu0/drain/", {}),
    ("/staff/users/alice/deactivate/", {}),
    ("/staff/users/alice/reactivate/", {}),
    ("/staff/alerts/{alert}/acknowledge/", {}),
]
OWN_PAGES = ["/me/", "/me/usage/", "/me/usage/daily.json", "/me/batches/", "/me/playground/", "/me/standing/",
             "/me/requests/", "/me/requests.csv"]


@pytest.fixture
def things(cast) -> dict[str, object]:
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="m")
    alert = SaturationAlert.objects.create(model="m", kind="queue", opened_at=timezone.now(),
                                           figures={"waiting": 40, "running": 8, "ratio": 5.0})
    return {"prefix": ApiKey.objects.get(pk=cast["bob"].key_id).prefix, "alert": alert.pk}


@pytest.mark.parametrize("path", STAFF_PAGES)
def test_anonymous_visitors_are_sent_to_sign_in(things, path):
    response = Client().get(path.format(**things))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("path", STAFF_PAGES)
def test_researchers_get_a_403_on_staff_pages(researcher_client, things, path):
    response = researcher_client.get(path.format(**things))
    assert response.status_code == 403
    assert b"This page is for staff" in response.content


@pytest.mark.parametrize("path", STAFF_PAGES)
def test_staff_see_every_staff_page(staff_client, things, path):
    assert staff_client.get(path.format(**things)).status_code == 200


@pytest.mark.parametrize(("path", "body"), STAFF_ACTIONS)
def test_staff_actions_have_the_same_door(staff_client, researcher_client, things, path, body):
    path = path.format(**things)
    anonymous = Client().post(path, body)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert researcher_client.post(path, body).status_code == 403
    assert staff_client.get(path).status_code == 405  # a link or a prefetch never changes anything
    assert staff_client.post(path, body).status_code == 302


def test_unknown_things_are_404_for_staff(staff_client, things):
    assert staff_client.get("/staff/keys/gp-nothing/revoke/").status_code == 404
    assert staff_client.get("/staff/tiers/gold/edit/").status_code == 404
    assert staff_client.post("/staff/replicas/none/drain/").status_code == 404
    assert staff_client.post("/staff/replicas/gpu0/explode/").status_code == 404
    assert staff_client.post("/staff/alerts/9999/acknowledge/").status_code == 404


@pytest.mark.parametrize("path", OWN_PAGES)
def test_own_pages_need_a_sign_in_and_nothing_more(researcher_client, cast, path):
    anonymous = Client().get(path)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert researcher_client.get(path).status_code == 200


def test_the_root_is_the_capacity_page_for_visitors_and_the_dashboard_once_signed_in(researcher_client):
    assert Client().get("/")["Location"] == "/capacity/"
    assert researcher_client.get("/")["Location"] == "/me/"


@pytest.mark.parametrize(("path", "body"), [
    ("/staff/keys/issue/", key_form(owner="carol", tier="batch")),
    ("/staff/keys/{prefix}/revoke/", {}),
    ("/staff/users/new/", {"username": "newcomer"}),
    ("/staff/tiers/batch/edit/", {"per_key_concurrency": 3}),
    ("/staff/replicas/gpu0/drain/", {}),
    ("/staff/users/alice/deactivate/", {}),
    ("/staff/users/alice/reactivate/", {}),
])
def test_every_form_needs_its_csrf_token(staff, things, path, body):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert client.post(path.format(**things), body).status_code == 403
    assert ApiKey.objects.filter(revoked_at__isnull=False).count() == 0


def test_the_navigation_matches_the_role(staff_client, researcher_client):
    staff_nav = staff_client.get("/me/").content.decode()
    mine = researcher_client.get("/me/").content.decode()
    for link in ("/staff/", "/staff/keys/", "/staff/users/", "/staff/tiers/", "/staff/replicas/", "/staff/alerts/",
                 "/staff/audit/"):
        assert f'href="{link}"' in staff_nav
        assert f'href="{link}"' not in mine
    for html in (staff_nav, mine):
        assert 'href="/me/"' in html and 'href="/me/usage/"' in html
        assert 'action="/accounts/logout/"' in html and 'href="/accounts/password/"' in html
    assert 'href="/accounts/login/"' in Client().get("/capacity/").content.decode()
