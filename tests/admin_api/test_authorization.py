"""Every admin endpoint: anonymous and non-staff are refused, staff (session or token) served."""

import json

import pytest
from django.test import Client

ENDPOINTS = [
    ("get", "/api/admin/keys", None),
    ("post", "/api/admin/keys", {"owner": "alice", "tier": "interactive"}),
    ("post", "/api/admin/keys/{prefix}/revoke", None),
    ("post", "/api/admin/keys/{prefix}/rotate", {"grace_seconds": 0}),
    ("get", "/api/admin/users", None),
    ("post", "/api/admin/users", {"username": "newcomer"}),
    ("post", "/api/admin/users/alice/tier", {"tier": "batch"}),
    ("get", "/api/admin/tiers", None),
    ("post", "/api/admin/tiers", {"name": "gold"}),
    ("patch", "/api/admin/tiers/interactive", {"per_key_concurrency": 3}),
    ("get", "/api/admin/replicas", None),
    ("post", "/api/admin/replicas", {"name": "gpu1", "base_url": "http://127.11.2.4:9", "model": "m"}),
    ("post", "/api/admin/replicas/gpu0/drain", None),
    ("patch", "/api/admin/replicas/gpu0", {"gpu_metrics_url": "http://127.11.2.9:9400/metrics"}),
    ("get", "/api/admin/alerts", None),
    ("get", "/api/admin/audit", None),
]

pytestmark = pytest.mark.django_db(transaction=True)


def call(client: Client, method: str, path: str, body, **extra):
    if body is None:
        return getattr(client, method)(path, **extra)
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **extra)


def prepared(path: str, cast) -> str:
    from fairness.models import ApiKey, Replica

    Replica.objects.get_or_create(name="gpu0", defaults={"base_url": "http://127.11.2.3:9", "model": "m"})
    return path.format(prefix=ApiKey.objects.get(pk=cast["bob"].key_id).prefix)


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_anonymous_callers_get_401(cast, method, path, body):
    response = call(Client(), method, prepared(path, cast), body)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="gpuportal"'  # the scheme it takes


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_researchers_get_401_too(researcher_client, cast, method, path, body):
    assert call(researcher_client, method, prepared(path, cast), body).status_code == 401


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_staff_with_a_session_are_served(staff_client, cast, method, path, body):
    response = call(staff_client, method, prepared(path, cast), body)
    assert response.status_code in (200, 201), response.content


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_staff_with_an_admin_token_are_served(admin_token, cast, method, path, body):
    response = call(Client(), method, prepared(path, cast), body, HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    assert response.status_code in (200, 201), response.content


def test_a_staff_session_needs_the_csrf_token_to_write(staff, cast):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert call(client, "post", "/api/admin/users", {"username": "x"}).status_code == 403
