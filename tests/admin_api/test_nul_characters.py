"""A NUL character anywhere in a request is a clear 4xx, never a server error (PostgreSQL cannot
store NUL, so it used to surface from the database driver as a 500)."""

import json

import pytest

from fairness.models import ApiKey, Replica, Tier

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "/api/admin/replicas", {"name": "r", "base_url": "http://e.invalid:8000", "model": "m",
                                         "tiers": ["batch", "in\x00teractive"]}, "tiers"),
        ("post", "/api/admin/replicas", {"name": "r", "base_url": "http://e.invalid:8000", "model": "m\x00"}, "model"),
        ("post", "/api/admin/keys", {"owner": "carol", "tier": "batch", "label": "a\x00b"}, "label"),
        ("post", "/api/admin/keys", {"owner": "car\x00ol", "tier": "batch"}, "owner"),
        ("post", "/api/admin/tiers", {"name": "x", "description": "\x00"}, "description"),
        ("patch", "/api/admin/tiers/batch", {"description": "\x00"}, "description"),
        ("post", "/api/admin/users/carol/tier", {"tier": "batch\x00"}, "tier"),
    ],
)
def test_a_nul_in_a_body_is_a_422_naming_the_field(staff_client, cast, method, path, body, field):
    before = (Replica.objects.count(), ApiKey.objects.count(), list(Tier.objects.values_list("name", "description")))
    response = getattr(staff_client, method)(path, data=json.dumps(body), content_type="application/json")
    assert response.status_code == 422, response.content
    assert field in response.content.decode() and "NUL" in response.content.decode()
    assert (Replica.objects.count(), ApiKey.objects.count(),
            list(Tier.objects.values_list("name", "description"))) == before


@pytest.mark.parametrize("path", ["/api/admin/keys", "/api/admin/tiers"])
def test_a_lone_surrogate_in_a_body_is_a_422(staff_client, cast, path):
    raw = '{"owner": "carol", "tier": "batch", "name": "x", "label": "\\ud800", "description": "\\ud800"}'
    response = staff_client.post(path, data=raw, content_type="application/json")
    assert response.status_code == 422, response.content
    assert "unicode" in response.content.decode()


@pytest.mark.parametrize(
    ("method", "url", "json_answer"),
    [
        ("post", "/api/admin/keys/gp-%00/revoke", True),
        ("post", "/api/admin/users/car%00ol/tier", True),
        ("get", "/api/admin/keys?x=%00", True),
        ("post", "/staff/keys/gp-%00/revoke/", False),
        ("get", "/staff/users/car%00ol/password/", False),
        ("get", "/staff/audit/?actor=%00", False),
    ],
)
def test_a_nul_in_a_url_is_a_400(staff_client, cast, method, url, json_answer):
    response = getattr(staff_client, method)(url)
    assert response.status_code == 400, response.content
    if json_answer:
        assert response.json() == {"detail": "The URL contains a NUL character."}
    else:
        assert b"NUL" in response.content
